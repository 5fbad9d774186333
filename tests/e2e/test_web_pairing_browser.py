"""Pairing a phone in a real Chromium (Debian's `chromium` through Playwright's
`executable_path`) at phone size: the code of `betcode web pair` typed on the sign-in screen,
or its QR code's link opened, signs the browser in; a used code signs nobody in, and after too
many wrong codes the right one is refused too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.browser import chromium, require_chromium
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.web import new_pairing_code

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.web.devices import MAX_WRONG_CODES
from betcode.web.token import read_or_create_token

playwright_api = require_chromium("the pairing browser tests")
expect = playwright_api.expect

PHONE = {"width": 390, "height": 844}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


@pytest.fixture
async def daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Daemon]:
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    settings = DaemonSettings(http=HttpSettings(listen="127.0.0.1:0"))
    started = Daemon(replace(config, settings=settings))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium(playwright_api) as launched:
        yield launched


def base_url(daemon: Daemon) -> str:
    assert daemon.web is not None
    assert daemon.web.url is not None
    return daemon.web.url


async def new_code(daemon: Daemon) -> str:
    return await new_pairing_code(base_url(daemon), read_or_create_token(daemon.config.config_dir))


async def phone_page(browser: Any, url: str) -> Any:
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = await context.new_page()
    await page.goto(url)
    return page


async def type_code(page: Any, code: str) -> None:
    await page.get_by_label("Pairing code").fill(code)
    await page.get_by_role("button", name="Sign in").click()


async def test_a_typed_code_signs_the_phone_in_once(browser: Any, daemon: Daemon) -> None:
    url = base_url(daemon)
    code = await new_code(daemon)
    phone = await phone_page(browser, url)
    await expect(phone.locator("#sign-in")).to_be_visible()
    await type_code(phone, code.lower())
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()
    await expect(phone.locator("#sign-in")).to_be_hidden()
    device = await phone.evaluate("JSON.parse(localStorage.getItem('betcode-device'))")
    assert device["device_id"].startswith("dev-")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await phone.screenshot(path=str(ARTIFACTS / "phone-paired.png"))
    # The page stays signed in across a reload: the credential, not the code.
    await phone.reload()
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()

    other = await phone_page(browser, url)
    await type_code(other, code)
    await expect(other.locator("#signed-out-reason")).to_contain_text("used already or expired")
    await expect(other.get_by_role("heading", name="Sessions")).to_be_hidden()
    assert await other.evaluate("localStorage.getItem('betcode-device')") is None


async def test_the_qr_codes_link_signs_in_and_leaves_the_address_bar(
    browser: Any, daemon: Daemon
) -> None:
    code = (await new_code(daemon)).replace("-", "")
    phone = await phone_page(browser, f"{base_url(daemon)}/#code={code}")
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()
    assert "code=" not in phone.url


async def test_after_too_many_wrong_codes_the_right_one_is_refused(
    browser: Any, daemon: Daemon
) -> None:
    code = await new_code(daemon)
    phone = await phone_page(browser, base_url(daemon))
    for wrong in range(MAX_WRONG_CODES):
        await type_code(phone, f"WRONG00{wrong}")
        await expect(phone.locator("#signed-out-reason")).to_contain_text("wrong")
        await phone.locator("#signed-out-reason").evaluate("node => node.textContent = ''")
    await type_code(phone, code)
    await expect(phone.locator("#signed-out-reason")).to_contain_text(
        "too many wrong pairing codes"
    )
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_hidden()


async def test_a_phone_revokes_another_device_whose_page_is_signed_out(
    browser: Any, daemon: Daemon
) -> None:
    url = base_url(daemon)
    laptop = await phone_page(browser, url)
    await type_code(laptop, await new_code(daemon))
    await expect(laptop.get_by_role("heading", name="Sessions")).to_be_visible()
    phone = await phone_page(browser, url)
    await type_code(phone, await new_code(daemon))
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()

    await phone.get_by_text("Signed-in devices").click()
    devices = phone.locator("#device-list li")
    await expect(devices).to_have_count(2)
    await expect(devices.filter(has_text="this browser")).to_have_count(1)
    phone.on("dialog", lambda dialog: dialog.accept())
    await devices.filter(has_not_text="this browser").get_by_role("button", name="Revoke").click()
    await expect(devices).to_have_count(1)
    # The laptop's next request is refused: it shows the sign-in screen again.
    await laptop.reload()
    await expect(laptop.locator("#sign-in")).to_be_visible()
