"""The web client as an installed app, in a real Chromium (Debian's `chromium` through
Playwright's `executable_path`) on a real daemon running the pinned real CLI against the mock
model: the web app manifest and its icons, the service worker registered and controlling the
page, Chromium's installability check, the app shell offline saying the daemon cannot be
reached, and a notification's Allow once / Deny answering a waiting approval through the
service worker.

What Chromium cannot do here, offline: subscribe to a real push service (its pushManager
talks to the vendor's: the page's "Notify me" says it failed, and why), so a push event is not
delivered; and click a notification's action button (headless has no notification UI). The
test calls the service worker's own handlers for those two steps (`showMessage`,
`answerFromNotification`) inside the real worker; the daemon's side of a push is
tests/integration/test_web_push.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.paths import require_pinned_claude
from harness.web import WebClient, new_link

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.web.token import read_or_create_token

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="Playwright for Python is not installed (pip: playwright)"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "SKIPPED LOUDLY: no Chromium at /usr/bin/chromium (Debian package `chromium`): the "
        "installable web client's browser tests did not run",
        allow_module_level=True,
    )

pytestmark = pytest.mark.real_cli

PHONE = {"width": 390, "height": 844}
TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'


@pytest.fixture
async def daemon(
    tmp_path: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Daemon]:
    config = daemon_config(
        tmp_path / "daemon", require_pinned_claude(), workspace.env(mock_api.base_url)
    )
    config = replace(config, settings=DaemonSettings(http=HttpSettings(listen="127.0.0.1:0")))
    running = Daemon(config)
    await running.start()
    yield running
    await running.stop()


@pytest.fixture
async def browser_context(tmp_path: Path) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium as root: no sandbox
        # A profile on disk: Chromium installs nothing from an incognito context.
        context = await driver.chromium.launch_persistent_context(
            tmp_path / "profile",
            executable_path=CHROMIUM,
            args=args,
            viewport=PHONE,
            is_mobile=True,
            has_touch=True,
        )
        yield context
        await context.close()


def base_url(daemon: Daemon) -> str:
    assert daemon.web is not None
    assert daemon.web.url is not None
    return daemon.web.url


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def installed_page(context: Any, daemon: Daemon) -> Any:
    """The page, signed in, once its worker (registered by the page's install.js) controls
    it."""
    page = await context.new_page()
    url = base_url(daemon)
    await page.goto(await new_link(url, read_or_create_token(daemon.config.config_dir)))
    await page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    await page.reload()  # the next load is the worker's
    return page


async def test_the_manifest_is_valid_and_chromium_finds_the_app_installable(
    browser_context: Any, daemon: Daemon
) -> None:
    page = await installed_page(browser_context, daemon)
    manifest = await page.evaluate(
        "fetch('/manifest.webmanifest', {credentials: 'include'})"
        ".then(async r => ({type: r.headers.get('content-type'), body: await r.json()}))"
    )
    assert manifest["type"].startswith("application/manifest+json")
    body = manifest["body"]
    assert body["name"] == "BetCode"
    assert body["start_url"] == "/"
    assert body["display"] == "standalone"
    sizes = set()
    for icon in body["icons"]:
        response = await page.request.get(base_url(daemon) + icon["src"])
        assert response.status == 200
        assert response.headers["content-type"] == "image/png"
        width, height = png_size(await response.body())
        assert icon["sizes"] == f"{width}x{height}"
        sizes.add(width)
    assert {192, 512} <= sizes
    assert await page.evaluate("navigator.serviceWorker.controller !== null")
    link = page.locator("link[rel=manifest]")
    assert await link.get_attribute("crossorigin") == "use-credentials"
    await playwright_api.expect(page.locator("#enable-notifications")).to_have_text("Notify me")
    assert await page.evaluate("navigator.serviceWorker.controller.scriptURL") == (
        base_url(daemon) + "/sw.js"
    )
    cdp = await browser_context.new_cdp_session(page)
    parsed = await cdp.send("Page.getAppManifest")
    assert parsed["errors"] == []
    installability = await cdp.send("Page.getInstallabilityErrors")
    assert installability["installabilityErrors"] == [], installability


async def test_the_shell_loads_offline_and_says_the_daemon_cannot_be_reached(
    browser_context: Any, daemon: Daemon
) -> None:
    page = await installed_page(browser_context, daemon)
    await page.locator("#connection").wait_for(state="attached")
    await browser_context.set_offline(True)
    await page.reload()
    connection = page.locator("#connection")
    await playwright_api.expect(connection).to_contain_text("daemon unreachable", timeout=30_000)
    await browser_context.set_offline(False)
    await page.reload()
    await playwright_api.expect(connection).not_to_contain_text("unreachable")


async def test_a_notification_action_answers_the_request_first_answer_wins(
    browser_context: Any, daemon: Daemon, workspace: Workspace
) -> None:
    await browser_context.grant_permissions(["notifications"], origin=base_url(daemon))
    page = await installed_page(browser_context, daemon)
    [worker] = browser_context.service_workers
    # "Notify me": Chromium's pushManager needs its vendor's push service, which this machine
    # cannot reach; the page says that subscribing failed, and why.
    button = page.locator("#enable-notifications")
    await button.click()
    await playwright_api.expect(button).to_have_text("Notify me (failed)", timeout=60_000)
    assert "push service did not answer" in (await button.get_attribute("title") or "")
    await playwright_api.expect(button).to_be_enabled()
    laptop = WebClient(base_url(daemon), read_or_create_token(daemon.config.config_dir), "web-lap")
    try:
        session_id = await laptop.create_session(str(workspace.repo))
        stream = await laptop.stream(session_id)
        await stream.say(TOOL_PROMPT)
        request = await stream.wait_for("permission_request")
        message = {
            "kind": "permission",
            "notification_id": request["request_id"],
            "request_id": request["request_id"],
            "session_id": session_id,
            "tool": "Bash",
            "title": "Bash waits for your approval",
            "body": "repo: python3 -c ...",
        }
        # The push message shown, with its two actions.
        shown = await worker.evaluate(
            f"showMessage({json.dumps(message)})"
            ".then(() => self.registration.getNotifications())"
            ".then(ns => ns.map(n => ({title: n.title, actions: n.actions.map(a => a.action)})))"
        )
        assert shown == [
            {"title": "Bash waits for your approval", "actions": ["allow_once", "deny"]}
        ]
        # Allow once from the notification: the worker's fetch, with the page's cookie.
        allowed = await worker.evaluate(
            f"answerFromNotification({json.dumps(message)}, 'allow_once')"
        )
        assert allowed == {
            "status": 200,
            "reply": {"accepted": True, "duplicate": False, "outcome": "allowed"},
        }
        result = await stream.wait_for("tool_call_result")
        assert "42" in result["output"]
        resolved = await stream.wait_for("permission_resolved")
        assert resolved["decided_by_client_id"] == "web-notification"
        # Deny from a second notification comes too late: the first answer stands.
        denied = await worker.evaluate(f"answerFromNotification({json.dumps(message)}, 'deny')")
        assert denied["reply"]["duplicate"] is True
        assert denied["reply"]["outcome"] == "allowed"
        titles = await worker.evaluate(
            "self.registration.getNotifications().then(ns => ns.map(n => n.title))"
        )
        assert titles == ["Bash: already answered: allowed"]
        await stream.wait_for("turn_complete")
        assert len(stream.of_kind("tool_call_result")) == 1
        await stream.close()
    finally:
        await laptop.close()
        await page.close()
