"""The web client's figures: a daemon (`betcode daemon start --foreground --http`, fake claude
children) in its own process, browser-protocol clients in another, Chromium for the last one.

    .venv/bin/python benchmarks/bench_web.py [--quick] [--json]

* web_events_per_s: a full-speed flood of text_delta lines watched by 10 WebSocket clients (the
  page's protocol: a bearer credential, `from=`, JSON arrays of events), no browser; events
  delivered to all clients / time from sending the message until the last client has the
  TurnComplete;
* permission_to_display_ms (p50, max): Chromium shows the page of a session; a fake claude asks
  for a Bash permission each turn; from the PermissionRequest event's timestamp (made in the
  daemon when it read claude's request) until the page's first animation frame with the
  approval card on screen (`window.betcode.stats.shown`). Both clocks are this machine's.
* tti_500 / tti_20000 (`--tti-only` for these alone): a session of about 500 and 20,000
  events (a fake claude's busy turn: remarks, Bash calls, their output) opened in Chromium at
  390x844 with touch: ms from the navigation's start until the first frame after the live
  edge, with the items shown and the JS heap then.

Figures are printed, never asserted (benchmarks/README.md has the measured ones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.fake_claude_messages import busy_turn

CLIENTS = 10
WARM_UP_TURN = [{"do": "text", "text": "ready"}]
START_TIMEOUT_S = 30.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = os.path.exists(CHROMIUM)
# Long sessions for time to interactive: steps of a busy turn (about 5 events each), added turn
# by turn to one session.
TTI_STEPS = {"500": 100, "20000": 3900}
TTI_REPEATS = 5


def flood_script(flood_lines: int) -> dict[str, Any]:
    """Turn 1 warms up, turn 2 floods, then a permission request every turn."""
    permission = {"do": "permission", "tool_name": "Bash", "input": {"command": "true"}}
    return {
        "turns": [WARM_UP_TURN, [{"do": "flood", "lines": flood_lines, "text": "x"}], [permission]]
    }


class WebDaemon:
    """The daemon with the web client on and a fake claude playing `script`."""

    def __init__(self, root: Path, script: dict[str, Any]) -> None:
        self.root = root
        (root / "repo").mkdir(parents=True)
        fake = make_fake_claude(root / "fake", script)
        self.env = {
            **os.environ,
            "BETCODE_CLAUDE_BIN": str(fake),
            "BETCODE_SOCKET": str(root / "sock" / "daemon.sock"),
            "BETCODE_DATA_DIR": str(root / "data"),
            "BETCODE_CONFIG_DIR": str(root / "config"),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"]
        with open(self.root / "daemon.log", "wb") as log:
            self.process = subprocess.Popen(
                [*command, "--no-import", "--http", f"127.0.0.1:{port}"],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        address = self.root / "data" / "web-address"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not address.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start; see {self.root / 'daemon.log'}")
            time.sleep(0.05)
        return address.read_text().strip()

    @property
    def token(self) -> str:
        return (self.root / "config" / "web-token").read_text().strip()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


def stream_url(base: str, session_id: str, after: int, client: str) -> str:
    return f"{base}/api/sessions/{session_id}/stream?from={after}&client={client}"


@contextlib.asynccontextmanager
async def web_session(token: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        yield http


class Driver:
    """Holds the input lock on one WebSocket: sends each turn's message, sees its events."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base
        self.events: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    async def open(self, directory: Path) -> str:
        async with self.http.post(
            f"{self.base}/api/sessions", json={"working_directory": str(directory)}
        ) as response:
            self.session_id = str((await response.json())["session_id"])
        url = stream_url(self.base, self.session_id, 0, "web-bench-driver")
        self.socket = await self.http.ws_connect(url, max_msg_size=0)
        self.reader = asyncio.create_task(self._read())
        return self.session_id

    async def _read(self) -> None:
        async for message in self.socket:
            self.events.extend(json.loads(message.data))
            self.changed.set()

    @property
    def last_sequence(self) -> int:
        return max((int(e.get("sequence", 0)) for e in self.events), default=0)

    async def turn(self, text: str) -> None:
        await self.socket.send_str(json.dumps({"message": {"content": text}}))

    async def wait_for(self, kind: str, count: int) -> dict[str, Any]:
        while True:
            found = [e for e in self.events if kind in e]
            if len(found) >= count:
                return found[count - 1]
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 120)

    async def close(self) -> None:
        await self.socket.close()
        self.reader.cancel()


async def watch(base: str, token: str, session_id: str, after: int, count: int) -> None:
    """The watching clients (run in a process of their own): connect `count` WebSockets from
    `after`, print "ready" once each is at the live edge, then one JSON line when every one has
    the turn's TurnComplete: events received and the wall time of the last one."""
    async with web_session(token) as http:
        sockets = [
            await http.ws_connect(
                stream_url(base, session_id, after, f"web-bench-{n}"), max_msg_size=0
            )
            for n in range(count)
        ]

        async def until_live(ws: aiohttp.ClientWebSocketResponse) -> None:
            async for message in ws:
                if message.data == "[]":
                    return

        await asyncio.gather(*(until_live(ws) for ws in sockets))
        print("ready", flush=True)

        async def until_done(ws: aiohttp.ClientWebSocketResponse) -> tuple[int, float]:
            events = 0
            async for message in ws:
                batch = json.loads(message.data)
                events += len(batch)
                if any("turn_complete" in event for event in batch):
                    return events, time.time()
            raise RuntimeError("stream ended early")

        results = await asyncio.gather(*(until_done(ws) for ws in sockets))
        print(
            json.dumps({"events": sum(r[0] for r in results), "done": max(r[1] for r in results)})
        )
        for ws in sockets:
            await ws.close()


async def fan_out(base: str, token: str, driver: Driver) -> dict[str, float]:
    after = driver.last_sequence
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--watch", base, token, driver.session_id, str(after),
        str(CLIENTS), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert watcher.stdout is not None
    assert (await watcher.stdout.readline()).strip() == b"ready"
    started = time.time()
    await driver.turn("flood")
    report = json.loads(await watcher.stdout.readline())
    await watcher.wait()
    elapsed = report["done"] - started
    return {
        "web_clients": CLIENTS,
        "web_events_delivered": report["events"],
        "web_events_per_s": round(report["events"] / elapsed),
    }


async def permission_display(
    base: str, link: str, driver: Driver, turns: int
) -> dict[str, float | list[float]]:
    from playwright.async_api import async_playwright

    delays: list[float] = []
    async with async_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        # wait_for_function polls with eval(), which the page's own CSP forbids.
        page = await browser.new_page(bypass_csp=True)
        await page.goto(link)
        await page.goto(f"{base}/#/s/{driver.session_id}")
        await page.wait_for_function("window.betcode.stats.caughtUp", timeout=120_000)
        for turn in range(1, turns + 1):
            await driver.turn(f"permission {turn}")
            request = (await driver.wait_for("permission_request", turn))["permission_request"]
            event = [e for e in driver.events if "permission_request" in e][turn - 1]
            request_id = request["request_id"]
            shown = await page.wait_for_function(
                f"window.betcode.stats.shown[{json.dumps(request_id)}]", timeout=30_000
            )
            made = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            delays.append(await shown.json_value() - made * 1000)
            async with driver.http.post(
                f"{base}/api/permissions/{request_id}", json={"decision": "allow_once"}
            ) as response:
                assert response.status == 200, await response.text()
            await driver.wait_for("turn_complete", turn + 2)  # + warm-up and flood turns
        await browser.close()
    return {
        "permission_to_display_samples": len(delays),
        "permission_to_display_ms_p50": round(statistics.median(delays), 1),
        "permission_to_display_ms_max": round(max(delays), 1),
        "permission_to_display_ms_all": [round(delay, 1) for delay in delays],
    }


async def run(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="betcode-bench-web-") as scratch:
        root = Path(scratch)
        daemon = WebDaemon(root, flood_script(20_000 if quick else 100_000))
        base = daemon.start()
        try:
            async with web_session(daemon.token) as http:
                driver = Driver(http, base)
                await driver.open(root / "repo")
                await driver.turn("warm up")
                await driver.wait_for("turn_complete", 1)
                figures: dict[str, Any] = await fan_out(base, daemon.token, driver)
                await driver.wait_for("turn_complete", 2)
                if HAVE_CHROMIUM:
                    async with http.post(f"{base}/api/links") as response:
                        link = f"{base}/#link={(await response.json())['link']}"
                    figures |= await permission_display(base, link, driver, 10 if quick else 30)
                else:
                    figures["permission_to_display"] = f"skipped: no Chromium at {CHROMIUM}"
                await driver.close()
        finally:
            daemon.stop()
        figures |= await time_to_interactive(root / "long")
    figures["machine"] = f"{platform.python_version()} on {os.cpu_count()} CPUs"
    return figures


async def time_to_interactive(root: Path) -> dict[str, Any]:
    """Each long session opened in Chromium at phone size (390x844, touch), REPEATS times:
    from the navigation's start until the first frame after the page reached the live edge
    (`stats.interactiveAt`), with the conversation's items and the JS heap then."""
    if not HAVE_CHROMIUM:
        return {"time_to_interactive": f"skipped: no Chromium at {CHROMIUM}"}
    from playwright.async_api import async_playwright

    # One session, grown turn by turn: about 500 events after the first, 20,000 after the second.
    daemon = WebDaemon(root, {"turns": [busy_turn(steps) for steps in TTI_STEPS.values()]})
    base = daemon.start()
    figures: dict[str, Any] = {}
    try:
        async with (
            web_session(daemon.token) as http,
            async_playwright() as playwright,
        ):
            async with http.post(f"{base}/api/links") as response:
                link = f"{base}/#link={(await response.json())['link']}"
            args = ["--no-sandbox"] if os.geteuid() == 0 else []
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
            context = await browser.new_context(
                viewport={"width": 390, "height": 844},
                is_mobile=True,
                has_touch=True,
                bypass_csp=True,  # wait_for_function polls with eval()
            )
            page = await context.new_page()
            await page.goto(link)
            await page.wait_for_function("localStorage.getItem('betcode-device')")
            driver = Driver(http, base)
            session_id = await driver.open(root / "repo")
            for turn, label in enumerate(TTI_STEPS, start=1):
                await driver.turn("work")
                await driver.wait_for("turn_complete", turn)
                times: list[float] = []
                for attempt in range(TTI_REPEATS):
                    await page.goto(f"{base}/?load={turn}.{attempt}#/s/{session_id}")
                    handle = await page.wait_for_function(
                        "window.betcode.stats.interactiveAt", timeout=120_000
                    )
                    times.append(float(await handle.json_value()))
                items = await page.evaluate("document.querySelectorAll('.item').length")
                heap = await page.evaluate("performance.memory.usedJSHeapSize")
                figures[f"tti_{label}_events"] = driver.last_sequence
                figures[f"tti_{label}_ms_median"] = round(statistics.median(times), 1)
                figures[f"tti_{label}_ms_all"] = [round(t, 1) for t in times]
                figures[f"tti_{label}_items_shown"] = items
                figures[f"tti_{label}_heap_mb"] = round(heap / 2**20, 1)
            await driver.close()
            await browser.close()
    finally:
        daemon.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--tti-only", action="store_true", help="only the long sessions' time to interactive"
    )
    parser.add_argument("--watch", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.watch:
        base, token, session_id, after, count = options.watch
        asyncio.run(watch(base, token, session_id, int(after), int(count)))
        return
    if options.tti_only:
        with tempfile.TemporaryDirectory(prefix="betcode-bench-web-") as scratch:
            figures = asyncio.run(time_to_interactive(Path(scratch)))
    else:
        figures = asyncio.run(run(options.quick))
    if options.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
