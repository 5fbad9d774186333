"""The web client in a real Chromium (Debian's `chromium`, driven by Playwright through
`executable_path`), on a real daemon running the pinned real CLI against the mock model.

One daemon and one browser serve the whole module. Screenshots go to `test-artifacts/web/`
(git-ignored). Without Chromium or Playwright every test here is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web as aiohttp_web
from harness.cli_process import betcode
from harness.daemon import Client, daemon_config
from harness.environment import Workspace, make_workspace
from harness.paths import require_pinned_claude
from harness.web import WebClient, new_link

from betcode.config.settings import DaemonSettings, HttpSettings, LimitSettings
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools import fake_claude_messages as lines
from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.fake_claude_messages import busy_turn
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2
from betcode.web.token import read_or_create_token

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="Playwright for Python is not installed (pip: playwright)"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "SKIPPED LOUDLY: no Chromium at /usr/bin/chromium (Debian package `chromium`; "
        "scripts/test_packages installs it as root): the web client's browser tests did not run",
        allow_module_level=True,
    )
expect = playwright_api.expect
expect.set_options(timeout=60_000)

pytestmark = [pytest.mark.real_cli, pytest.mark.asyncio(loop_scope="module")]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
ALLOWED_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
DENIED_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(13)\\""} again'
QUESTION_PROMPT = 'SCN:ask {"questions": 2} ask me'
SLOW_PROMPT = 'SCN:slow {"words": 60, "delay": 0.04} count slowly'


@dataclass
class WebSite:
    """The module's daemon (restartable in place, same port and files) and its link."""

    config: DaemonConfig
    daemon: Daemon
    workspace: Workspace

    @property
    def url(self) -> str:
        return f"http://{self.config.settings.http.listen}"

    async def link(self) -> str:
        """A new one-time sign-in link, as `betcode web` prints it."""
        return await new_link(self.url, read_or_create_token(self.config.config_dir))

    async def restart(self) -> None:
        await self.daemon.stop()
        self.daemon = Daemon(self.config)
        await self.daemon.start()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def module_mock_api() -> Iterator[MockAnthropic]:
    with MockAnthropic() as mock:
        yield mock


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def site(
    tmp_path_factory: pytest.TempPathFactory, module_mock_api: MockAnthropic
) -> AsyncIterator[WebSite]:
    root = tmp_path_factory.mktemp("web")
    workspace = make_workspace(root / "claude")
    config = daemon_config(
        root / "daemon", require_pinned_claude(), workspace.env(module_mock_api.base_url)
    )
    http = HttpSettings(listen=f"127.0.0.1:{free_port()}")
    # A lock request is decided after one second, not ten (input_lock.transfer_seconds).
    sessions = SessionSettings(lock_transfer_seconds=1.0)
    config = replace(config, settings=DaemonSettings(http=http), sessions=sessions)
    running = WebSite(config, Daemon(config), workspace)
    await running.daemon.start()
    try:
        yield running
    finally:
        await running.daemon.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as driver:
        # Chromium refuses to run as root with its sandbox on.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = await driver.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any, site: WebSite) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    await opened.goto(await site.link())
    yield opened
    await context.close()


@contextlib.asynccontextmanager
async def page_on_own_daemon(
    browser: Any, config: DaemonConfig, **context_options: Any
) -> AsyncIterator[Any]:
    """A daemon of the test's own (another claude, other settings) and a page signed in to it."""
    daemon = Daemon(config)
    await daemon.start()
    context = await browser.new_context(**context_options)
    try:
        assert daemon.web is not None
        assert daemon.web.url is not None
        page = await context.new_page()
        await page.goto(await new_link(daemon.web.url, read_or_create_token(config.config_dir)))
        yield page
    finally:
        await context.close()
        await daemon.stop()


async def fits_width(page: Any, width: int, buttons: tuple[str, ...] = ()) -> None:
    """Nothing overflows horizontally; each named button lies within the viewport."""
    overflow = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"{overflow} px of horizontal overflow at {width} px"
    for name in buttons:
        box = await page.get_by_role("button", name=name, exact=True).last.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= width, name


async def small_touch_targets(page: Any) -> list[str]:
    """Every visible control (buttons, links, fields, choices) smaller than 44 px either way."""
    return list(
        await page.evaluate(
            """() => [...document.querySelectorAll(
                    'button, a, input, textarea, summary, label.choice')]
                .filter((node) => node.offsetParent !== null)
                .filter((node) => !node.closest('.markdown'))
                .map((node) => [node, node.getBoundingClientRect()])
                .filter(([node, box]) => box.height < 44 || box.width < 44)
                .map(([node, box]) => `${node.outerHTML.slice(0, 80)} ${box.width}x${box.height}`)
            """
        )
    )


async def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def page_stats(page: Any) -> dict[str, Any]:
    return dict(await page.evaluate("window.betcode.stats"))


async def start_session(page: Any, directory: Path, prompt: str) -> str:
    await page.get_by_label("Directory").fill(str(directory))
    await page.get_by_label("First prompt").fill(prompt)
    await page.get_by_role("button", name="Start session").click()
    await expect(page.locator("#session-view")).to_be_visible()
    return str(page.url.split("#/s/", 1)[1])


async def send(page: Any, text: str) -> None:
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send").click()


async def test_approvals_and_a_question_answered_in_the_page_seen_by_a_grpc_client(
    page: Any, site: WebSite
) -> None:
    assert "link=" not in page.url  # the one-time link is out of the address bar
    await page.set_viewport_size(PHONE)
    session_id = await start_session(page, site.workspace.repo, ALLOWED_PROMPT)
    client_id = await page.evaluate("window.betcode.clientId")
    observer = Client(site.config.socket_path, "terminal-observer")
    observer.resume(session_id)
    try:
        card = page.locator("#action-bar")
        await expect(card.get_by_role("button", name="Allow once")).to_be_visible()
        await expect(page).to_have_title("(1) BetCode")
        await fits_width(page, PHONE["width"], ("Allow once", "Allow for session", "Deny"))
        assert await small_touch_targets(page) == []
        await screenshot(page, "phone-approval")
        await card.get_by_role("button", name="Allow once").click()
        await expect(page.locator(".tool .result").first).to_contain_text("42")
        await expect(page.locator(".note", has_text="turn complete")).to_have_count(1)
        await expect(page).to_have_title("BetCode")

        await send(page, DENIED_PROMPT)
        await card.get_by_label("Deny message").fill("not on a Friday")
        await card.get_by_role("button", name="Deny").click()
        await expect(page.locator(".outcome").last).to_contain_text("not on a Friday")
        await expect(page.locator(".note", has_text="turn complete")).to_have_count(2)

        await page.set_viewport_size(DESKTOP)
        await send(page, QUESTION_PROMPT)
        questions = card.locator("fieldset")
        await expect(questions).to_have_count(2)
        await fits_width(page, DESKTOP["width"], ("Submit answers",))
        await bar_buttons_on_top(page, ("Submit answers",))
        await screenshot(page, "desktop-question")
        # Nothing picked: refused in the page, nothing sent.
        await card.get_by_role("button", name="Submit answers").click()
        await expect(card.get_by_role("alert")).to_have_text(
            "Answer every question (pick an option or type one) first."
        )
        await expect(questions).to_have_count(2)
        await questions.nth(0).get_by_role("radio").first.check()
        await questions.nth(1).get_by_role("radio", name="Other").check()
        await questions.nth(1).get_by_role("textbox").fill("purple")
        await card.get_by_role("button", name="Submit answers").click()
        await expect(page.locator(".outcome").last).to_contain_text("Answered by this page")
        await expect(page.locator(".note", has_text="turn complete")).to_have_count(3)
        await expect(page.locator(".assistant").last).to_contain_text("purple")
        await fits_width(page, DESKTOP["width"])
        await screenshot(page, "desktop-conversation")
        await page.set_viewport_size(PHONE)
        await fits_width(page, PHONE["width"])
        await screenshot(page, "phone-conversation")

        # The terminal client saw the same events and every answer, by the page's client id.
        resolved = [e.permission_resolved for e in observer.of_kind("permission_resolved")]
        assert [r.outcome for r in resolved] == ["allowed", "denied", "answered"]
        assert {r.decided_by_client_id for r in resolved} == {client_id}
        assert resolved[1].message == "not on a Friday"
        stats = await page_stats(page)
        final = stats["received"][-1]
        await observer.wait_for_sequence(final)
        assert stats["received"] == list(range(1, final + 1))
        assert [e.sequence for e in observer.events if e.sequence] == stats["received"]
    finally:
        await observer.close()


async def test_reload_mid_turn_and_a_network_cut_lose_and_repeat_nothing(
    page: Any, site: WebSite
) -> None:
    sockets: list[Any] = []
    cut = asyncio.Event()

    async def network(route: Any) -> None:
        if cut.is_set():
            await route.close(code=4000, reason="network down")
            return
        sockets.append((route, route.connect_to_server()))

    await page.route_web_socket("**/stream?*", network)
    session_id = await start_session(page, site.workspace.repo, SLOW_PROMPT)
    conversation = page.locator(".assistant").last
    await expect(conversation).to_contain_text("word5 ")
    await page.reload()  # mid-turn: the whole history again, once, then live
    await expect(conversation).to_contain_text("word15 ")
    # The reloaded page may show word15 from its first page of events before its stream is
    # routed: the cut waits for that stream, or it would cut the closed first one.
    await expect(page.locator("#connection")).to_contain_text("live")
    assert len(sockets) == 2
    cut.set()
    route, server = sockets[-1]  # the reloaded page's live connection
    await server.close()
    await route.close(code=4000, reason="network down")
    await expect(page.locator("#connection")).to_have_text("reconnecting…")
    await asyncio.sleep(1.0)  # the turn goes on without the page
    cut.clear()
    # Back live (the turn may have ended before the cut: its end alone proves no reconnect).
    await expect(page.locator("#connection")).to_contain_text("live")
    await expect(page.locator(".note", has_text="turn complete")).to_have_count(1)
    text = await conversation.inner_text()
    words = text.split()
    assert words == [f"word{n}" for n in range(1, 61)], text
    stats = await page_stats(page)
    assert stats["received"] == list(range(1, stats["received"][-1] + 1))
    assert stats["gaps"] == 0
    assert stats["connects"] >= 2
    assert session_id in page.url


async def test_after_a_daemon_restart_the_page_replays_once_and_goes_on_live(
    page: Any, site: WebSite
) -> None:
    await start_session(page, site.workspace.repo, 'SCN:plain {"text": "before restart"} hi')
    await expect(page.locator(".assistant").last).to_have_text("before restart")
    await site.restart()
    await expect(page.locator("#connection")).to_contain_text("live")
    await send(page, 'SCN:plain {"text": "after restart"} again')
    await expect(page.locator(".assistant").last).to_have_text("after restart")
    await expect(page.locator(".assistant")).to_have_count(2)
    stats = await page_stats(page)
    assert stats["received"] == list(range(1, stats["received"][-1] + 1))
    assert stats["connects"] == 2
    await page.reload()  # the whole history from the restarted daemon, once
    await expect(page.locator(".assistant")).to_have_count(2)
    await send(page, 'SCN:plain {"text": "after reload"} and again')
    await expect(page.locator(".assistant").last).to_have_text("after reload")
    reloaded = await page_stats(page)
    assert reloaded["received"] == list(range(1, reloaded["received"][-1] + 1))
    assert reloaded["received"][-1] > stats["received"][-1]


async def test_read_only_under_another_clients_lock_until_the_page_asks_for_it(
    page: Any, site: WebSite
) -> None:
    terminal = Client(site.config.socket_path, "terminal")
    terminal.converse(agent_pb2.StartConversation(working_directory=str(site.workspace.repo)))
    try:
        await terminal.wait_for("session_info")
        terminal.say(ALLOWED_PROMPT)
        await terminal.wait_for("permission_request")
        # A background tab on the session list counts what waits, in its title too.
        await page.goto(f"{site.url}/#/")
        await expect(page.locator(".session-list .waiting").first).to_have_text(" · 1 waiting")
        await expect(page).to_have_title("(1) BetCode")

        await page.goto(f"{site.url}/#/s/{terminal.session_id}")
        banner = page.locator("#lock-banner")
        await expect(page.locator("#lock-holder")).to_have_text(
            "Read-only: terminal holds the input lock."
        )
        # Read-only: no message can be sent, and the box is put away to leave room to read.
        await expect(page.locator("#send")).to_be_disabled()
        await expect(page.get_by_label("Message", exact=True)).to_be_hidden()
        # An approval needs no lock: answered here, seen by the terminal.
        await page.get_by_role("button", name="Allow for session").click()
        resolved = await terminal.wait_for("permission_resolved")
        assert resolved.permission_resolved.outcome == "allowed"
        grants = await terminal.stub.ListSessionGrants(
            agent_pb2.ListSessionGrantsRequest(session_id=terminal.session_id)
        )
        assert [grant.granted for grant in grants.grants] == [True]
        await terminal.wait_for("turn_complete")

        await page.get_by_role("button", name="Request input lock").click()
        await expect(page.locator("#lock-progress")).to_contain_text(
            "Asking terminal for the input lock"
        )
        await expect(banner).to_be_hidden()
        await send(page, 'SCN:slow {"words": 200, "delay": 0.05} count slowly')
        await expect(page.locator(".assistant").last).to_contain_text("word3 ")
        await page.get_by_role("button", name="Interrupt").click()
        await expect(page.locator("#connection")).to_have_text("live · idle")
        await expect(page.locator(".turn-end").last).to_have_text("turn interrupted")
        assert "word200" not in await page.locator(".assistant").last.inner_text()
        holders = [e.input_lock.holder_client_id for e in terminal.of_kind("input_lock")]
        assert holders[-1] == await page.evaluate("window.betcode.clientId")
    finally:
        await terminal.close()


async def test_subagent_activity_is_nested_under_its_task_call(
    browser: Any, tmp_path: Path, site: WebSite
) -> None:
    # The mock model has no subagents; a fake claude replays what the CLI prints for one.
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {"prompt": "look"}}
    inner = lines.assistant("msg_inner", "fake", {"type": "text", "text": "inner finding"})
    turn = [
        {"do": "raw", "text": json.dumps(lines.assistant("msg_outer", "fake", task))},
        {"do": "raw", "text": json.dumps({**inner, "parent_tool_use_id": "toolu_task"})},
        {"do": "raw", "text": json.dumps(lines.tool_result("toolu_task", "task done", False))},
        {"do": "text", "text": "outer summary"},
    ]
    fake = make_fake_claude(tmp_path / "fake", {"turns": [turn]})
    http = HttpSettings(listen="127.0.0.1:0")
    config = replace(
        daemon_config(tmp_path / "daemon", fake, dict(os.environ)),
        settings=DaemonSettings(http=http),
    )
    async with page_on_own_daemon(browser, config, viewport=DESKTOP) as page:
        await start_session(page, site.workspace.repo, "use a subagent")
        call = page.locator(".tool", has_text="Task")
        await expect(call.locator(".children .assistant")).to_have_text("inner finding")
        await expect(call.locator(".result")).to_contain_text("task done")
        await expect(page.locator(".conversation > .assistant")).to_have_text("outer summary")


XSS = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
MARKDOWN_TEXT = "# Findings\n\nSome **bold** words.\n\n```python\nprint('hi')\n```\n\n" + XSS + "\n"


async def covered(page: Any, locator: Any) -> str | None:
    """What lies on top at the centre of the element (None: the element itself or inside it)."""
    box = await locator.bounding_box()
    assert box is not None
    on_top = await locator.evaluate(
        """(node, [x, y]) => {
                const top = document.elementFromPoint(x, y);
                return top && (top === node || node.contains(top)) ? null
                    : top ? top.outerHTML.slice(0, 120) : "nothing (off screen)";
            }""",
        [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
    )
    return None if on_top is None else str(on_top)


async def bar_buttons_on_top(page: Any, names: tuple[str, ...]) -> None:
    bar = page.locator("#action-bar")
    for name in names:
        button = bar.get_by_role("button", name=name, exact=True)
        await expect(button).to_be_visible()
        assert await covered(page, button) is None, name
        box = await button.bounding_box()
        assert box is not None
        assert box["height"] >= 44, (name, box)
        assert box["width"] >= 44, (name, box)


async def test_the_waiting_request_comes_first_rendered_and_never_covered(
    browser: Any, site: WebSite
) -> None:
    """Another session's approval stays in the bar, on top and in view, while this session
    streams, at phone size (touch) and on a desktop; the page renders Markdown and code, shows
    an edit as a diff, and shows model and tool text with HTML in it as text."""
    terminal = Client(site.config.socket_path, "terminal")
    terminal.converse(agent_pb2.StartConversation(working_directory=str(site.workspace.repo)))
    context = await browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    try:
        await terminal.wait_for("session_info")
        terminal.say(ALLOWED_PROMPT)
        await terminal.wait_for("permission_request")
        page = await context.new_page()
        await page.goto(await site.link())
        await start_session(page, site.workspace.repo, 'SCN:slow {"words": 500, "delay": 0.02} go')
        await expect(page.locator(".assistant").last).to_contain_text("word5 ")
        bar = page.locator("#action-bar")
        await expect(bar).to_contain_text("Permission: Bash")
        await expect(bar.locator(".rule")).to_contain_text("Bash(python3")
        names = ("Allow once", "Allow for session", "Deny")
        await bar_buttons_on_top(page, names)
        assert await small_touch_targets(page) == []
        await screenshot(page, "phone-streaming-with-approval")
        # The reader scrolls up: the page stays there while output streams, offering a jump.
        log = page.locator("#conversation")
        await expect(page.locator(".assistant").last).to_contain_text("word120 ")
        await log.evaluate("node => { node.scrollTop = 0; }")
        await expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
        await asyncio.sleep(1.0)
        assert await log.evaluate("node => node.scrollTop") == 0
        await page.set_viewport_size(DESKTOP)
        await bar_buttons_on_top(page, names)
        await screenshot(page, "desktop-streaming-with-approval")
        await page.get_by_role("button", name="Jump to latest").click()
        await expect(page.get_by_role("button", name="Jump to latest")).to_be_hidden()
        at_bottom = "n => n.scrollTop + n.clientHeight >= n.scrollHeight - 48"
        assert await log.evaluate(at_bottom)
        await bar.get_by_role("button", name="Allow once").click()
        resolved = await terminal.wait_for("permission_resolved")
        assert resolved.permission_resolved.outcome == "allowed"
        await expect(bar).to_be_hidden()
        await expect(page.locator(".turn-end")).to_have_text("turn complete")

        # Markdown and code rendered; the model's HTML is text, and nothing of it ran.
        await send(page, f"SCN:plain {json.dumps({'text': MARKDOWN_TEXT})} render")
        answer = page.locator(".assistant").last
        await expect(answer.locator("h1")).to_have_text("Findings")
        await expect(answer.locator("strong")).to_have_text("bold")
        await expect(answer.locator("pre code .hljs-built_in")).to_have_text("print")
        await expect(answer).to_contain_text('<img src=x onerror="window.pwned=1">')
        assert await answer.locator("img, script").count() == 0

        # A Write approval is a diff of what it writes; its path and content, HTML, as text.
        await page.set_viewport_size(PHONE)
        written = {"file_path": f"{site.workspace.repo}/{XSS}.py", "content": f"x = '{XSS}'\n"}
        await send(page, f"SCN:tool_write {json.dumps(written)} write")
        await expect(bar.locator(".diff-add")).to_have_text(f"+x = '{XSS}'")
        await expect(bar.locator(".diff-path")).to_have_text(written["file_path"])
        await expect(page.locator(".request-card .diff-add").last).to_have_text(f"+x = '{XSS}'")
        await bar_buttons_on_top(page, names)
        await screenshot(page, "phone-write-diff")
        await bar.get_by_label("Deny message").fill("not that file")
        await bar.get_by_role("button", name="Deny").click()
        await expect(page.locator(".outcome").last).to_have_text(
            "Denied by this page: not that file"
        )
        await expect(page.locator(".turn-end")).to_have_count(3)
        # The finished call is one line; opened, it shows the same diff.
        call = page.locator("details.tool", has_text="Write").last
        await expect(call).not_to_have_attribute("open", "")
        await expect(call.locator(".diff-add")).to_have_text(f"+x = '{XSS}'")
        assert await page.evaluate("window.pwned") is None
        await page.set_viewport_size(DESKTOP)
        await screenshot(page, "desktop-conversation-rendered")
    finally:
        await context.close()
        await terminal.close()


async def test_a_link_signs_in_one_browser_once_and_no_credential_leaves_the_origin(
    browser: Any, site: WebSite
) -> None:
    """The link printed by `betcode web` is exchanged once: opened again (a second browser,
    the history), it signs nobody in. The device's credential is never a cookie: another web
    server on the same host, at another port, receives nothing of it."""
    received: list[dict[str, str]] = []

    async def record(request: aiohttp_web.Request) -> aiohttp_web.Response:
        received.append({"path": request.path, **request.headers})
        return aiohttp_web.Response(
            text="<title>other</title>other server", content_type="text/html"
        )

    other = aiohttp_web.Application()
    other.router.add_get("/{tail:.*}", record)
    runner = aiohttp_web.AppRunner(other)
    await runner.setup()
    other_port = free_port()
    await aiohttp_web.TCPSite(runner, "127.0.0.1", other_port).start()
    first = await browser.new_context(viewport=PHONE)
    second = await browser.new_context(viewport=PHONE)
    try:
        link = await site.link()
        page = await first.new_page()
        await page.goto(link)
        await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
        assert "link=" not in page.url
        device = await page.evaluate("JSON.parse(localStorage.getItem('betcode-device'))")
        assert device["device_id"].startswith("dev-")
        assert await first.cookies() == []

        again = await second.new_page()
        await again.goto(link)
        await expect(again.get_by_role("heading", name="Sign in")).to_be_visible()
        await expect(again.locator("#signed-out-reason")).to_contain_text("used already")
        status = await again.evaluate("fetch('/api/sessions').then(r => r.status)")
        assert status == 401
        await screenshot(again, "phone-link-used")

        # The signed-in browser visits another local server: nothing of its credential goes.
        await page.goto(f"http://127.0.0.1:{other_port}/page")
        await page.evaluate(
            f"fetch('http://127.0.0.1:{other_port}/api', {{credentials: 'include'}})"
        )
        assert {"/page", "/api"} <= {headers["path"] for headers in received}
        for headers in received:
            sent = json.dumps(headers)
            assert device["credential"] not in sent
            assert "Authorization" not in headers
            assert "Cookie" not in headers
    finally:
        await first.close()
        await second.close()
        await runner.cleanup()


STEPS = 800  # a remark and a call (its result inside) each: 1,600 items, more than the page keeps


async def test_a_long_session_opens_at_its_end_and_pages_back_on_scroll(
    browser: Any, tmp_path: Path, site: WebSite
) -> None:
    """About 4,000 events: while following, the page keeps at most 1,500 items; it opens with
    the recent part (not the whole history), loads earlier pages as the reader scrolls up, each
    event once; an Edit waiting meanwhile shows its diff in the bar, at phone size and on a
    desktop."""
    edit = {
        "do": "permission",
        "tool_name": "Edit",
        "input": {
            "file_path": f"{site.workspace.repo}/module_7.py",
            "old_string": "def size():\n    return 7\n",
            "new_string": "def size():\n    return 49\n",
        },
    }
    fake = make_fake_claude(tmp_path / "fake", {"turns": [busy_turn(STEPS), [edit]]})
    http = HttpSettings(listen="127.0.0.1:0")
    config = replace(
        daemon_config(tmp_path / "daemon", fake, dict(os.environ)),
        settings=DaemonSettings(http=http),
    )
    async with page_on_own_daemon(
        browser, config, viewport=PHONE, has_touch=True, is_mobile=True
    ) as page:
        await start_session(page, site.workspace.repo, "work")
        await expect(page.locator(".turn-end")).to_have_text("turn complete")
        last = (await page_stats(page))["received"][-1]
        assert last > 5 * STEPS
        items = "document.querySelectorAll('#conversation > .item').length"
        assert await page.evaluate(items) == 1500  # trimmed while following
        await page.reload()
        await expect(page.locator(".turn-end")).to_have_text("turn complete")
        stats = await page_stats(page)
        assert stats["received"][0] > last - 400  # the recent part only
        older = page.locator("#conversation > .older")
        await expect(older).to_contain_text("Show earlier")
        await expect(page.locator(".tool", has_text="module_0.py")).to_have_count(0)
        log = page.locator("#conversation")
        while await older.count():
            await log.evaluate("node => { node.scrollTop = 0; }")
            await asyncio.sleep(0.1)
        await expect(page.locator(".tool", has_text="module_0.py ")).to_have_count(1)
        summaries = await page.locator(".tool .title").all_inner_texts()
        assert summaries == [f"Bash: wc -l module_{step}.py" for step in range(STEPS)]

        await send(page, "edit it")
        bar = page.locator("#action-bar")
        await expect(bar.locator(".diff-del")).to_have_text("-    return 7")
        await expect(bar.locator(".diff-add")).to_have_text("+    return 49")
        await bar_buttons_on_top(page, ("Allow once", "Allow for session", "Deny"))
        await screenshot(page, "phone-long-session-edit-approval")
        await page.set_viewport_size(DESKTOP)
        await bar_buttons_on_top(page, ("Allow once", "Allow for session", "Deny"))
        await screenshot(page, "desktop-long-session-edit-approval")
        await bar.get_by_role("button", name="Allow once").click()
        await expect(bar).to_be_hidden()


async def test_directories_are_picked_sessions_renamed_and_deleted_in_the_dark(
    browser: Any, site: WebSite
) -> None:
    """A new session's directory is one tap among the recent ones; a session's name, HTML in
    it, is shown as text in the list and the page; rename and delete work from the page; the
    page follows the system's dark scheme."""
    owner = WebClient(site.url, read_or_create_token(site.config.config_dir))
    await owner.create_session(str(site.workspace.repo))  # a recent directory
    await owner.close()
    context = await browser.new_context(viewport=PHONE, color_scheme="dark", has_touch=True)
    try:
        page = await context.new_page()
        await page.goto(await site.link())
        chip = page.locator("#directory-choices button", has_text=str(site.workspace.repo))
        await chip.first.click()
        await expect(page.get_by_label("Directory")).to_have_value(str(site.workspace.repo))
        await page.get_by_role("button", name="Start session").click()
        await expect(page.locator("#session-view")).to_be_visible()
        session_id = page.url.split("#/s/", 1)[1]
        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept(XSS)))
        await page.get_by_role("button", name="Rename").click()
        await expect(page.locator("#session-name")).to_have_text(XSS)
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(15, 18, 22)"
        await screenshot(page, "phone-dark-session")
        await page.goto(f"{site.url}/#/")
        await expect(page.locator(".session-list .title", has_text=XSS)).to_have_count(1)
        assert await page.evaluate("window.pwned") is None
        await page.goto(f"{site.url}/#/s/{session_id}")
        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.get_by_role("button", name="Delete").click()
        await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
        await expect(page.locator(".session-list .title", has_text=XSS)).to_have_count(0)
    finally:
        await context.close()


async def test_the_message_box_completes_commands_and_files(
    page: Any, site: WebSite, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".claude" / "commands").mkdir(parents=True)
    (project / ".claude" / "commands" / "ship-it.md").write_text("Ship it: $ARGUMENTS\n")
    (project / "src").mkdir()
    (project / "src" / "main_module.py").write_text("print('hi')\n")
    await page.set_viewport_size(PHONE)
    await start_session(page, project, "")
    box = page.get_by_label("Message", exact=True)
    await box.press_sequentially("/shi")
    await page.get_by_role("button", name="/ship-it").click()
    await expect(box).to_have_value("/ship-it ")
    await box.fill("")
    await box.press_sequentially("look at @main_mod")
    await expect(page.locator(".suggestion").first).to_contain_text("@src/main_module.py")
    await screenshot(page, "phone-file-completion")
    await page.locator(".suggestion").first.click()
    await expect(box).to_have_value("look at @src/main_module.py ")
    await expect(page.locator("#suggestions")).to_be_hidden()


async def test_a_page_viewing_a_session_does_not_hold_up_a_terminal_run(
    page: Any, site: WebSite
) -> None:
    """The page shows the session (live, caught up) while `betcode run --session` continues
    it from a terminal: the run gets the input lock at once, and the page shows its answer."""
    session_id = await start_session(page, site.workspace.repo, "")
    await expect(page.locator("#connection")).to_contain_text("live")
    await page.wait_for_function("window.betcode.stats.caughtUp")
    run = await betcode(
        site.config.socket_path,
        site.workspace.repo,
        "run",
        "--session",
        session_id,
        'SCN:plain {"text": "from the terminal"} hi',
    )
    assert run.code == 0, run.err
    assert "holds the input lock" not in run.err
    await expect(page.locator(".assistant").last).to_have_text("from the terminal")
    await expect(page.locator("#lock-banner")).to_be_hidden()  # the run has gone again


async def test_a_phone_shows_the_viewed_sessions_request_with_room_to_read(
    browser: Any, site: WebSite
) -> None:
    """At 390x844, read-only under a terminal's lock, the bar offers the viewed session's own
    request though another session's waits longer, and leaves the conversation real room; once
    it is answered, the other session's request says at the top whose it is (short id)."""
    older = Client(site.config.socket_path, "terminal-older")
    viewed = Client(site.config.socket_path, "terminal-viewed")
    context = await browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    try:
        for terminal, prompt in ((older, DENIED_PROMPT), (viewed, ALLOWED_PROMPT)):
            terminal.converse(
                agent_pb2.StartConversation(working_directory=str(site.workspace.repo))
            )
            await terminal.wait_for("session_info")
            terminal.say(prompt)
            await terminal.wait_for("permission_request")
        page = await context.new_page()
        await page.goto(await site.link())
        await page.goto(f"{site.url}/#/s/{viewed.session_id}")
        bar = page.locator("#action-bar")
        await expect(page.locator("#lock-banner")).to_be_visible()
        await expect(bar.locator(".summary")).to_contain_text("print(6 * 7)")
        await expect(bar).to_contain_text("in this session")
        await expect(bar.locator(".bar-from")).to_have_count(0)
        await expect(page.locator(".request-card")).to_have_count(1)
        names = ("Allow once", "Allow for session", "Deny")
        await bar_buttons_on_top(page, names)
        await screenshot(page, "phone-approval-read-only")
        room = await page.locator("#conversation").evaluate("node => node.clientHeight")
        assert room >= 200, f"{room} px of conversation at 390x844"
        bar_height = await bar.evaluate("node => node.offsetHeight")
        assert bar_height <= 0.45 * PHONE["height"] + 1, bar_height
        await screenshot(page, "phone-approval-read-only")

        await bar.get_by_role("button", name="Allow once").click()
        assert (await viewed.wait_for("permission_resolved")).permission_resolved.outcome == (
            "allowed"
        )
        short = older.session_id[:8]
        await expect(bar.locator(".bar-from")).to_have_text(
            f"From another session: session {short}"
        )
        await expect(bar.locator(".summary")).to_contain_text("print(13)")
        assert older.session_id not in await bar.inner_text()
        await bar_buttons_on_top(page, names)
        await screenshot(page, "phone-approval-other-session")
        await bar.get_by_role("button", name="Deny").click()
        assert (await older.wait_for("permission_resolved")).permission_resolved.outcome == (
            "denied"
        )
        await expect(bar).to_be_hidden()
    finally:
        await context.close()
        await older.close()
        await viewed.close()


async def test_a_cost_limit_request_shows_its_question_not_a_raw_tool_name(
    browser: Any, tmp_path: Path, site: WebSite, module_mock_api: MockAnthropic
) -> None:
    """A session past its cost cap asks before the next turn: the card and the bar say so in
    words, with the amounts, and an allow sends the held message."""
    settings = DaemonSettings(
        http=HttpSettings(listen="127.0.0.1:0"),
        limits=LimitSettings(session_cost_usd=0.000001),  # the first turn reaches it
    )
    config = replace(
        daemon_config(
            tmp_path / "daemon",
            require_pinned_claude(),
            site.workspace.env(module_mock_api.base_url),
        ),
        settings=settings,
    )
    async with page_on_own_daemon(
        browser, config, viewport=PHONE, has_touch=True, is_mobile=True
    ) as page:
        session_id = await start_session(page, site.workspace.repo, 'SCN:plain {"text": "one"} a')
        await expect(page.locator(".assistant").last).to_have_text("one")
        await send(page, 'SCN:plain {"text": "two"} b')
        card = page.locator(".request-card").last
        question = f"session {session_id} has spent $"
        await expect(card.locator("strong")).to_have_text("Cost limit reached")
        await expect(card.locator(".description")).to_contain_text(question)
        await expect(card.locator(".description")).to_contain_text("limit; allow another $")
        assert "BetCode:CostLimit" not in await card.inner_text()
        bar = page.locator("#action-bar")
        await expect(bar.locator(".description")).to_contain_text(question)
        await expect(bar.locator(".held q")).to_have_text('SCN:plain {"text": "two"} b')
        assert "BetCode:CostLimit" not in await bar.inner_text()
        await bar_buttons_on_top(page, ("Allow once", "Allow for session", "Deny"))
        await screenshot(page, "phone-cost-limit")
        await bar.get_by_role("button", name="Allow once").click()
        await expect(page.locator(".assistant").last).to_have_text("two")
