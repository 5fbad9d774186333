"""Pairing a phone with `betcode web pair`: the QR code and the short code it prints, each good
once and for minutes, and wrong codes refused after a few, whatever code comes next."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.qr import draws
from harness.web import WebClient

from betcode.cli.web_cmd import LOOPBACK_HINT
from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.web import devices as devices_module
from betcode.web.devices import MAX_WRONG_CODES
from betcode.web.token import read_or_create_token


class Site:
    def __init__(self, daemon: Daemon) -> None:
        assert daemon.web is not None
        assert daemon.web.url is not None
        self.daemon = daemon
        self.url = daemon.web.url
        self.token = read_or_create_token(daemon.config.config_dir)

    async def new_code(self) -> str:
        owner = WebClient(self.url, self.token, "web-owner")
        try:
            status, made = await owner.call("POST", "/api/pairing-codes")
            assert status == 201, made
            assert made["expires_at"] - time.time() == pytest.approx(300, abs=30)
            return str(made["code"])
        finally:
            await owner.close()

    async def pair(self, code: str, name: str = "phone") -> tuple[int, dict[str, Any]]:
        stranger = WebClient(self.url, "")
        try:
            status, body = await stranger.call(
                "POST", "/api/devices/pair", {"code": code, "name": name}
            )
            return status, dict(body)
        finally:
            await stranger.close()

    async def device_ids(self) -> list[str]:
        owner = WebClient(self.url, self.token, "web-owner")
        try:
            status, body = await owner.call("GET", "/api/devices")
            assert status == 200
            return [d["device_id"] for d in body["devices"]]
        finally:
            await owner.close()


@pytest.fixture
async def site(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Site]:
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    settings = DaemonSettings(http=HttpSettings(listen="127.0.0.1:0"))
    daemon = Daemon(replace(config, settings=settings))
    await daemon.start()
    try:
        yield Site(daemon)
    finally:
        await daemon.stop()


async def test_a_code_signs_in_one_device_once_typed_in_any_case_and_dashes(site: Site) -> None:
    code = await site.new_code()
    assert len(code) == 9
    assert code[4] == "-"
    typed = f" {code[:4].lower()} {code[5:]} "
    status, device = await site.pair(typed)
    assert status == 201, device
    phone = WebClient(site.url, str(device["credential"]), "web-phone")
    try:
        status, who = await phone.call("GET", "/api/whoami")
        assert (status, who["id"]) == (200, device["device_id"])
        # A device may not make pairing codes: the owner's alone.
        status, body = await phone.call("POST", "/api/pairing-codes")
        assert (status, body["error"]["code"]) == (403, "OWNER_ONLY")
    finally:
        await phone.close()
    status, body = await site.pair(code)
    assert (status, body["error"]["code"]) == (401, "CODE_REFUSED")
    assert "betcode web pair" in str(body["error"])
    assert await site.device_ids() == [device["device_id"]]


async def test_an_expired_code_signs_nobody_in(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices_module, "CODE_SECONDS", 0.2)
    owner = WebClient(site.url, site.token, "web-owner")
    try:
        status, made = await owner.call("POST", "/api/pairing-codes")
        assert status == 201
    finally:
        await owner.close()
    await asyncio.sleep(0.5)
    status, body = await site.pair(made["code"])
    assert (status, body["error"]["code"]) == (401, "CODE_REFUSED")
    # A link's secret is no code, nor a code a link.
    status, body = await site.pair("x" * 43)
    assert status == 401
    assert await site.device_ids() == []


async def test_too_many_wrong_codes_refuse_every_code_for_a_while(site: Site) -> None:
    code = await site.new_code()
    for wrong in range(MAX_WRONG_CODES):
        status, body = await site.pair(f"0000000{wrong}")
        assert (status, body["error"]["code"]) == (401, "CODE_REFUSED")
    status, body = await site.pair(code)  # the right one, but too late
    assert (status, body["error"]["code"]) == (429, "TOO_MANY_GUESSES")
    assert "too many wrong pairing codes" in str(body["error"])
    assert await site.device_ids() == []
    # The owner's one-time links still sign in: only codes are guessable.
    owner = WebClient(site.url, site.token, "web-owner")
    stranger = WebClient(site.url, "")
    try:
        status, made = await owner.call("POST", "/api/links")
        assert status == 201
        status, _ = await stranger.call(
            "POST", "/api/devices/pair", {"link": made["link"], "name": "laptop"}
        )
        assert status == 201
    finally:
        await owner.close()
        await stranger.close()


async def web_pair(site: Site, *args: str) -> str:
    """`betcode web pair ARGS` against the site's daemon: its output."""
    env = {
        **os.environ,
        "BETCODE_CONFIG_DIR": str(site.daemon.config.config_dir),
        "BETCODE_DATA_DIR": str(site.daemon.config.data_dir),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", "web", "pair", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out_bytes, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out_bytes.decode()


async def test_betcode_web_pair_prints_a_qr_code_of_the_link_and_the_code(site: Site) -> None:
    out = await web_pair(site)
    qr_part, _, text = out.partition("\n\n")
    code = text.split("type the code:", 1)[1].split()[0]
    assert "once, within 5 minutes" in text
    assert site.token not in out
    assert draws(qr_part, f"{site.url}/#code={code.replace('-', '')}")
    status, device = await site.pair(code)
    assert status == 201, device
    # The site serves on 127.0.0.1: the phone needs another address, and is told so.
    assert text.splitlines()[-1] == LOOPBACK_HINT.format(url=site.url)


async def test_web_pair_says_nothing_of_loopback_for_a_reachable_base_url(site: Site) -> None:
    out = await web_pair(site, "--base-url", "https://laptop.lan:8443")
    assert "open https://laptop.lan:8443 and type the code" in out
    assert "loopback" not in out


async def test_any_signed_in_device_lists_and_revokes_devices(site: Site) -> None:
    status, phone = await site.pair(await site.new_code(), "phone")
    assert status == 201
    status, laptop = await site.pair(await site.new_code(), "laptop")
    assert status == 201
    from_laptop = WebClient(site.url, laptop["credential"], "web-laptop")
    from_phone = WebClient(site.url, phone["credential"], "web-phone")
    try:
        status, listed = await from_laptop.call("GET", "/api/devices")
        assert status == 200
        assert [(d["name"], d["signed_in"]) for d in listed["devices"]] == [
            ("phone", True),
            ("laptop", True),
        ]
        status, body = await from_laptop.call("DELETE", f"/api/devices/{phone['device_id']}")
        assert (status, body) == (200, {"revoked": True})
        status, body = await from_phone.call("GET", "/api/devices")
        assert status == 401  # the lost phone is out
        # A device signs itself out too; rotating the token stays the owner's.
        status, body = await from_laptop.call("POST", "/api/rotate")
        assert (status, body["error"]["code"]) == (403, "OWNER_ONLY")
        status, body = await from_laptop.call("DELETE", f"/api/devices/{laptop['device_id']}")
        assert status == 200
        assert (await from_laptop.call("GET", "/api/sessions"))[0] == 401
    finally:
        await from_laptop.close()
        await from_phone.close()
