"""The web client's access rules and its setting, table-tested (the HTTP server is in
tests/integration/test_web_api.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from betcode.config.settings import HttpSettings
from betcode.web.access import Access, credential, is_relayed
from betcode.web.devices import Devices
from betcode.web.token import TokenFile, read_or_create_token, rotate_token, token_path


@pytest.mark.parametrize(
    ("listen", "tls", "problem"),
    [
        ("", False, None),
        ("127.0.0.1:8484", False, None),
        ("localhost:0", False, None),
        ("[::1]:8484", False, None),
        ("127.0.0.2:8484", False, None),
        ("0.0.0.0:8484", False, "not a loopback address"),
        ("192.168.1.5:8484", False, "needs TLS"),
        ("0.0.0.0:8484", True, None),
        ("example.com:8484", True, "IP address or localhost"),
        ("127.0.0.1", False, "not HOST:PORT"),
        ("127.0.0.1:99999", False, "not HOST:PORT"),
    ],
)
def test_http_listen_setting(listen: str, tls: bool, problem: str | None) -> None:
    files = {"tls_cert": "/c.pem", "tls_key": "/k.pem"} if tls else {}
    if problem is None:
        assert HttpSettings(listen=listen, **files).listen == listen
    else:
        with pytest.raises(ValueError, match=problem):
            HttpSettings(listen=listen, **files)


def test_tls_needs_both_files() -> None:
    with pytest.raises(ValueError, match="together"):
        HttpSettings(listen="0.0.0.0:1", tls_cert="/c.pem")


def access(config_dir: Path, tls: bool) -> Access:
    # The Host and Origin rules use no store: no writer, no reader.
    return Access(Devices(TokenFile(config_dir), cast(Any, None), cast(Any, None)), 8484, tls)


@pytest.mark.parametrize(
    ("host", "tls", "allowed"),
    [
        ("127.0.0.1:8484", False, True),
        ("localhost:8484", False, True),
        ("[::1]:8484", False, True),
        ("127.0.0.2:9999", False, True),  # any 127/8 address is this machine
        ("localhost:9999", False, True),  # an ssh tunnel's local port
        ("localhost", False, True),
        ("[::1]", False, True),
        ("localhost:80x", False, False),
        ("attacker.test:8484", False, False),  # DNS rebinding
        (None, False, False),
        ("phone-lan-name:8484", True, True),  # the certificate binds the name
    ],
)
def test_host_check(tmp_path: Path, host: str | None, tls: bool, allowed: bool) -> None:
    assert access(tmp_path, tls).host_allowed(host) is allowed


def test_origin_must_be_this_origin(tmp_path: Path) -> None:
    rules = access(tmp_path, False)
    assert rules.origin_allowed("http://127.0.0.1:8484", "127.0.0.1:8484")
    assert not rules.origin_allowed("https://127.0.0.1:8484", "127.0.0.1:8484")
    assert not rules.origin_allowed("http://evil.test", "127.0.0.1:8484")
    assert not rules.origin_allowed("null", "127.0.0.1:8484")


def test_token_is_private_and_rotation_is_seen_without_a_restart(tmp_path: Path) -> None:
    first = read_or_create_token(tmp_path)
    assert token_path(tmp_path).stat().st_mode & 0o777 == 0o600
    assert read_or_create_token(tmp_path) == first
    checker = TokenFile(tmp_path)
    assert checker.matches(first)
    assert not checker.matches("")
    assert not checker.matches(first + "x")
    second = rotate_token(tmp_path)
    assert second != first
    assert token_path(tmp_path).stat().st_mode & 0o777 == 0o600
    assert checker.matches(second)
    assert not checker.matches(first)
    assert checker.fingerprint() == hashlib.sha256(second.encode()).hexdigest()
    token_path(tmp_path).unlink()
    assert not checker.matches(second)


@pytest.mark.parametrize(
    ("headers", "given"),
    [
        ({"Authorization": "Bearer abc_-1"}, "abc_-1"),
        ({"Sec-WebSocket-Protocol": "betcode, bearer.abc_-1"}, "abc_-1"),
        ({"Cookie": "betcode_token=abc"}, ""),  # a cookie is never a credential
        ({"Authorization": "Basic abc"}, ""),
        ({}, ""),
    ],
)
def test_the_credential_comes_from_a_header_only(headers: dict[str, str], given: str) -> None:
    assert credential(make_mocked_request("GET", "/api/sessions", headers=headers)) == given


async def test_only_the_gateway_socket_makes_a_request_relayed(tmp_path: Path) -> None:
    """The same app on TCP (the LAN listener) and on a Unix socket (the gateway's): only the
    socket a request arrives on decides, a header claiming to be relayed changes nothing."""

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(is_relayed(request))

    app = web.Application()
    app.router.add_get("/api/relayed", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    gateway_socket = tmp_path / "gateway.sock"
    try:
        await web.UnixSite(runner, str(gateway_socket)).start()
        tcp = web.TCPSite(runner, "127.0.0.1", 0)
        await tcp.start()
        port = runner.addresses[-1][1]
        claims = {"X-BetCode-Relayed": "1", "Forwarded": "for=relay", "X-Forwarded-For": "relay"}
        url = f"http://127.0.0.1:{port}/api/relayed"
        async with aiohttp.ClientSession() as lan, lan.get(url, headers=claims) as got:
            assert await got.json() is False
        connector = aiohttp.UnixConnector(path=str(gateway_socket))
        async with (
            aiohttp.ClientSession(connector=connector) as gateway,
            gateway.get("http://localhost/api/relayed") as got,
        ):
            assert await got.json() is True
    finally:
        await runner.cleanup()
