"""The web client on the LAN and through the relay, side by side, in Chromium: how long until a
waiting request, and a live-streamed word, is on the phone's screen.

    .venv/bin/python benchmarks/bench_relay_app.py [--quick] [--json]

One relay in this process (its own nats-server), one daemon in this process on its tunnel, with
its web client on loopback, running the pinned real CLI against the mock model. Two pages in
Debian's Chromium at 390x844 show the same session: one from the daemon's own address (the LAN
path: fetch and a WebSocket), one from the relay's address (the full app through the relay:
sealed WebGatewayService calls carried by the relay's call WebSocket, its gRPC routing, NATS and
the tunnel). A browser-protocol client drives the session (it holds the input lock; the pages
watch).

* request_visible_ms: from the PermissionRequest event's timestamp (made in the daemon when it
  read claude's request) until the page's first animation frame with the approval on its action
  bar (`window.betcode.stats.shown`);
* text_delta_visible_ms: from each text delta's event timestamp until the word it completes is
  in the page's answer (a MutationObserver's callback; the page renders Markdown once a
  frame).

p50 / p99 per path. Both clocks are this machine's. Figures are printed, never asserted
(benchmarks/README.md has the measured ones).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.browser import CHROMIUM
from harness.relay import MACHINE, Rig, relay_rig
from harness.web import WebClient, WebStream, new_link, new_pairing_code, sign_in
from latency_report import percentiles, run_and_print

from betcode.config.settings import HttpSettings
from betcode.web.token import read_or_create_token

PHONE: Any = {"width": 390, "height": 844}
# A command that writes: it waits for approval (a read-only one may be allowed at once).
TOOL_PROMPT = 'SCN:tool_bash {"command": "echo turn >> bench.txt"} go'
# A word followed by a space: complete (the text so far may end inside "word12").
WORD = re.compile(r"word(\d+)\s")
# Records when each word is first in an answer added from now on (ms since the epoch, as
# Date.now()); the previous turn's watch stops.
WATCH_WORDS = """() => {
  window.wordsWatch?.disconnect();
  window.wordsSeen = {};
  const fresh = new Set();
  window.wordsWatch = new MutationObserver((records) => {
    const now = Date.now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.nodeType === 1 && node.classList.contains("assistant")) fresh.add(node);
      }
    }
    for (const node of fresh) {
      for (const match of node.textContent.matchAll(/word(\\d+)\\s/g)) {
        window.wordsSeen[match[1]] ??= now;
      }
    }
  });
  window.wordsWatch.observe(document.getElementById("conversation"), {
    childList: true, subtree: true, characterData: true,
  });
}"""


def epoch_ms(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp() * 1000


def words_made(events: list[dict[str, Any]]) -> dict[str, float]:
    """Each word of the turn's text, and the timestamp of the delta that completed it."""
    made: dict[str, float] = {}
    text = ""
    for event in events:
        if "text_delta" not in event:
            continue
        text += event["text_delta"].get("text", "")
        for match in WORD.finditer(text):
            made.setdefault(match.group(1), epoch_ms(event))
    return made


async def relay_page(context: Any, rig: Rig, code: str) -> Any:
    page = await context.new_page()
    await page.goto(f"https://127.0.0.1:{rig.relay.port}/")
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill("pw-123456")
    await page.get_by_role("button", name="Sign in").click()
    await page.locator("#machine-list li", has_text=MACHINE).get_by_role("button").click()
    await page.get_by_label("Pairing code").fill(code)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_role("heading", name="Sessions").wait_for()
    return page


async def measure(rig: Rig, repo: Path, turns: int, words: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    http = HttpSettings(listen="127.0.0.1:0")
    rig.config = replace(rig.config, settings=replace(rig.config.settings, http=http))
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    lan_url = rig.daemon.web.url or ""
    owner_token = read_or_create_token(rig.config.config_dir)
    driver_device = await sign_in(lan_url, owner_token, "bench driver")
    driver = WebClient(lan_url, driver_device["credential"], "web-bench-driver")
    session_id = await driver.create_session(str(repo))
    stream: WebStream = await driver.stream(session_id)
    code = await new_pairing_code(lan_url, owner_token)

    figures: dict[str, list[float]] = {
        f"{path}_{what}": [] for path in ("lan", "relay") for what in ("request", "delta")
    }
    async with async_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        # wait_for_function polls with eval(), which the page's own CSP forbids.
        lan_context = await browser.new_context(
            viewport=PHONE, is_mobile=True, has_touch=True, bypass_csp=True
        )
        relay_context = await browser.new_context(
            viewport=PHONE,
            is_mobile=True,
            has_touch=True,
            bypass_csp=True,
            ignore_https_errors=True,
        )
        lan = await lan_context.new_page()
        await lan.goto(await new_link(lan_url, owner_token))
        relay = await relay_page(relay_context, rig, code)
        pages = {"lan": lan, "relay": relay}
        for page in pages.values():
            await page.evaluate(f"location.hash = '#/s/{session_id}'")
            await page.wait_for_function("window.betcode.stats.caughtUp", timeout=120_000)
        for turn in range(1, turns + 1):
            await stream.say(TOOL_PROMPT)
            request = await stream.wait_for("permission_request", turn, within_s=120)
            [event] = [e for e in stream.events if e.get("permission_request") is request]
            request_id = json.dumps(request["request_id"])
            for path, page in pages.items():
                shown = await page.wait_for_function(
                    f"window.betcode.stats.shown[{request_id}]", timeout=60_000
                )
                figures[f"{path}_request"].append(await shown.json_value() - epoch_ms(event))
            await driver.answer(request["request_id"], decision="allow_once")
            await stream.wait_for("turn_complete", 2 * turn - 1, within_s=120)

            for page in pages.values():
                await page.evaluate(WATCH_WORDS)
            began = len(stream.events)
            await stream.say(f'SCN:slow {{"words": {words}, "delay": 0.02}} count')
            await stream.wait_for("turn_complete", 2 * turn, within_s=120)
            made_at = words_made(stream.events[began:])
            for path, page in pages.items():
                last = json.dumps(str(words - 1))  # the last word has no space after it
                await page.wait_for_function(f"window.wordsSeen[{last}]", timeout=60_000)
                seen: dict[str, float] = await page.evaluate("window.wordsSeen")
                figures[f"{path}_delta"] += [seen[word] - at for word, at in made_at.items()]
        await browser.close()
    await stream.close()
    await driver.close()
    return {
        "lan_request_visible_ms": percentiles(figures["lan_request"], 1),
        "relay_request_visible_ms": percentiles(figures["relay_request"], 1),
        "lan_text_delta_visible_ms": percentiles(figures["lan_delta"], 1),
        "relay_text_delta_visible_ms": percentiles(figures["relay_delta"], 1),
    }


async def main(quick: bool) -> dict[str, Any]:
    turns, words = (3, 20) if quick else (20, 40)
    with tempfile.TemporaryDirectory(prefix="betcode-bench-relay-app-") as folder:
        async with relay_rig(Path(folder)) as (rig, workspace):
            return await measure(rig, workspace.repo, turns, words)


if __name__ == "__main__":
    run_and_print(__doc__.splitlines()[0], main)
