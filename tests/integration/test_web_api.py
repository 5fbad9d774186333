"""The daemon's web client without a browser: access rules, bad input, and the JSON/WebSocket
protocol on the real CLI (mock model), next to a gRPC client of the same session."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from harness.cli_process import betcode
from harness.conditions import until
from harness.daemon import Client, DaemonProcess, daemon_config, daemon_process_env
from harness.environment import Workspace
from harness.web import WebClient, WebStream, sign_in

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.config.values import MIB
from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2
from betcode.web.token import rotate_token, token_path

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
PLAIN_PROMPT = 'SCN:plain {"text": "from the terminal"} hi'


class WebDaemon:
    def __init__(self, daemon: Daemon, config_dir: Path, socket: Path) -> None:
        self.daemon = daemon
        self.config_dir = config_dir
        self.socket = socket
        assert daemon.web is not None
        assert daemon.web.url is not None
        self.url = daemon.web.url

    @property
    def token(self) -> str:
        return token_path(self.config_dir).read_text().strip()

    def client(self, client_id: str = "web-test") -> WebClient:
        return WebClient(self.url, self.token, client_id)

    def client_types(self) -> dict[str, str]:
        """client id → client type, as `connected_clients` lists them now."""
        with sqlite3.connect(self.daemon.config.data_dir / "daemon.db") as db:
            return dict(db.execute("SELECT client_id, client_type FROM connected_clients"))


@pytest.fixture
async def web_daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[WebDaemon]:
    settings = DaemonSettings(max_payload_bytes=MIB, http=HttpSettings(listen="127.0.0.1:0"))
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    config = replace(config, settings=settings)
    daemon = Daemon(config)
    await daemon.start()
    try:
        yield WebDaemon(daemon, config.config_dir, config.socket_path)
    finally:
        await daemon.stop()


async def raw_get(
    url: str, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    # A session of its own per request: no cookie carried over from an earlier one.
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers=headers or {}, allow_redirects=False) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


async def test_access_needs_a_credential_the_right_host_and_origin(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    url, token = web_daemon.url, web_daemon.token
    assert token_path(web_daemon.config_dir).stat().st_mode & 0o777 == 0o600
    # The page and its bundle hold nothing secret: served to anyone on a loopback Host.
    for path in ("/", "/static/app.js"):
        status, body, headers = await raw_get(url + path)
        assert status == 200, path
        assert "Set-Cookie" not in headers
    # The API needs a credential: without one, 401 saying how to get a link.
    status, body, _ = await raw_get(url + "/api/sessions")
    assert status == 401
    assert "betcode web" in body
    # Neither a token in the URL nor a cookie is a credential (a cookie ignores ports).
    status, _, headers = await raw_get(f"{url}/?token={token}")
    assert (status, "Set-Cookie" in headers) == (200, False)
    for cookie in (f"betcode_token={token}", f"token={token}"):
        status, _, _ = await raw_get(url + "/api/sessions", {"Cookie": cookie})
        assert status == 401
    bearer = {"Authorization": f"Bearer {token}"}
    status, _, _ = await raw_get(url + "/api/sessions", {**bearer, "Origin": url})
    assert status == 200
    # A wrong Origin or Host is refused even with the credential.
    status, body, _ = await raw_get(url + "/api/sessions", {**bearer, "Origin": "http://a.test"})
    assert status == 403
    assert "BAD_ORIGIN" in body
    port = url.rsplit(":", 1)[1]
    status, body, _ = await raw_get(
        url + "/api/sessions", {**bearer, "Host": f"rebind.test:{port}"}
    )
    assert status == 403
    assert "BAD_HOST" in body


async def test_a_link_signs_in_one_device_once_and_revoking_it_closes_its_streams(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    device = await sign_in(web_daemon.url, web_daemon.token, "phone")
    phone = WebClient(web_daemon.url, device["credential"], "web-phone")
    owner = web_daemon.client("web-owner")
    try:
        session_id = await phone.create_session(str(workspace.repo))
        # A device may not make links nor codes, nor rotate: the owner's alone.
        for method, path in (("POST", "/api/links"), ("POST", "/api/pairing-codes")):
            status, body = await phone.call(method, path)
            assert (status, body["error"]["code"]) == (403, "OWNER_ONLY")
        # A link is good once, and only before it expires.
        status, made = await owner.call("POST", "/api/links")
        assert status == 201
        assert made["expires_at"] - time.time() == pytest.approx(600, abs=30)
        pairing = {"link": made["link"], "name": "laptop"}
        assert (await owner.call("POST", "/api/devices/pair", pairing))[0] == 201
        status, body = await owner.call("POST", "/api/devices/pair", pairing)
        assert (status, body["error"]["code"]) == (401, "LINK_REFUSED")
        assert "used already or has expired" in body["error"]["message"]
        status, listed = await owner.call("GET", "/api/devices")
        assert [(d["name"], d["signed_in"]) for d in listed["devices"]] == [
            ("phone", True),
            ("laptop", True),
        ]
        # Revoked: the device's silent stream is closed at once, its credential refused.
        silent = await phone.stream(session_id)
        await asyncio.wait_for(silent.caught_up.wait(), 30)
        status, body = await owner.call("DELETE", f"/api/devices/{device['device_id']}")
        assert (status, body) == (200, {"revoked": True})
        await asyncio.wait_for(silent.closed(), 1.0)
        assert silent.socket.close_code == 4401
        status, body = await phone.call("GET", "/api/sessions")
        assert status == 401
        status, body = await owner.call("DELETE", f"/api/devices/{device['device_id']}")
        assert (status, body["error"]["code"]) == (404, "DEVICE_NOT_FOUND")
    finally:
        await phone.close()
        await owner.close()


async def test_a_rotated_token_signs_every_device_out_and_closes_silent_streams(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    """Even when the daemon is not told (the file replaced by hand): it watches the file."""
    device = await sign_in(web_daemon.url, web_daemon.token, "phone")
    phone = WebClient(web_daemon.url, device["credential"], "web-phone")
    owner = web_daemon.client("web-owner")
    try:
        _, unused = await owner.call("POST", "/api/links")
        session_id = await owner.create_session(str(workspace.repo))
        streams = [await phone.stream(session_id), await owner.stream(session_id)]
        for stream in streams:
            await asyncio.wait_for(stream.caught_up.wait(), 30)
        rotate_token(web_daemon.config_dir)
        for stream in streams:
            await asyncio.wait_for(stream.closed(), 1.0)
            assert stream.socket.close_code == 4401
        assert (await phone.call("GET", "/api/sessions"))[0] == 401
        assert (await owner.call("GET", "/api/sessions"))[0] == 401
        fresh = WebClient(web_daemon.url, web_daemon.token)
        try:
            status, _ = await fresh.call(
                "POST", "/api/devices/pair", {"link": unused["link"], "name": "late"}
            )
            assert status == 401  # a link made before the rotation is void too
        finally:
            await fresh.close()
    finally:
        await phone.close()
        await owner.close()


async def test_bad_input_gets_a_clear_status_and_changes_nothing(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    client = web_daemon.client()
    try:
        session_id = await client.create_session(str(workspace.repo))
        _, before = await client.call("GET", "/api/sessions")
        cases = [
            ("GET", "/api/sessions/no-such-session/stream?from=0", None, 404, "SESSION_NOT_FOUND"),
            ("GET", f"/api/sessions/{session_id}/stream", None, 400, "INVALID_REQUEST"),
            ("POST", "/api/permissions/no-such-request", {"decision": "allow_once"}, 404,
             "PERMISSION_NOT_FOUND"),
            ("POST", "/api/permissions/x", {"decision": "maybe"}, 400, "INVALID_REQUEST"),
            ("POST", "/api/sessions", {"working_directory": "relative/dir"}, 400,
             "INVALID_REQUEST"),
            ("POST", "/api/sessions", ["not", "an", "object"], 400, "INVALID_REQUEST"),
            ("POST", "/api/sessions/no-such-session/lock", None, 404, "SESSION_NOT_FOUND"),
            ("POST", "/api/sessions", {"working_directory": "x" * (MIB + 10)}, 413,
             "PAYLOAD_TOO_LARGE"),
        ]  # fmt: skip
        for method, path, body, status, code in cases:
            got, reply = await client.call(method, path, body)
            assert (got, reply["error"]["code"]) == (status, code), (method, path, reply)
        async with client.http.post(
            web_daemon.url + "/api/sessions", data=b"{not json"
        ) as response:
            assert response.status == 400
            assert "not JSON" in (await response.json())["error"]["message"]
        bad_client = WebClient(web_daemon.url, web_daemon.token, "cli-pretending")
        try:
            got, reply = await bad_client.call("POST", f"/api/sessions/{session_id}/lock")
            assert got == 400
            assert "web-" in reply["error"]["message"]
        finally:
            await bad_client.close()
        # A WebSocket message over the payload limit closes the stream with 1009 (too big).
        stream = await client.stream(session_id)
        await asyncio.wait_for(stream.caught_up.wait(), 30)
        await stream.say("x" * (MIB + 10))
        await asyncio.wait_for(stream.closed(), 30)
        assert stream.socket.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        assert not stream.of_kind("user_input")
        _, after = await client.call("GET", "/api/sessions")
        assert after == before
    finally:
        await client.close()


@pytest.mark.real_cli
async def test_stream_approval_and_a_grpc_client_see_the_same_events(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    web = web_daemon.client("web-phone")
    observer = Client(web_daemon.socket, "terminal")
    try:
        session_id = await web.create_session(str(workspace.repo))
        stream = await web.stream(session_id, after=0)
        await asyncio.wait_for(stream.caught_up.wait(), 30)
        observer.resume(session_id)
        # Each is listed as what it is: the browser page as `web`, the gRPC observer as `cli`.
        expected_types = {"web-phone": "web", "terminal": "cli"}
        await until(lambda: web_daemon.client_types() == expected_types, 30)
        await stream.send({"message": {"content": TOOL_PROMPT}})
        # Not an AgentRequest: an error for this client only, and the stream goes on.
        await stream.socket.send_str("{broken")
        error = await stream.wait_for("error")
        assert error["code"] == "INVALID_REQUEST"
        request = await stream.wait_for("permission_request")
        assert request["tool_name"] == "Bash"
        assert "6 * 7" in request["input"]["command"]
        first = await web.answer(request["request_id"], decision="allow_once")
        assert first == {"accepted": True, "duplicate": False, "outcome": "allowed"}
        again = await web.answer(request["request_id"], decision="deny")
        assert again["duplicate"] is True
        assert again["outcome"] == "allowed"
        result = await stream.wait_for("tool_call_result")
        assert "42" in result["output"]
        await stream.wait_for("turn_complete")
        resolved = await observer.wait_for("permission_resolved")
        assert resolved.permission_resolved.decided_by_client_id == "web-phone"
        await observer.wait_for("turn_complete")
        final = stream.sequences[-1]
        await observer.wait_for_sequence(final)
        assert stream.sequences == list(range(1, final + 1))
        assert [e.sequence for e in observer.events if e.sequence] == stream.sequences
        # Pages of stored events, newest first: what a long session's page opens with.
        path = f"/api/sessions/{session_id}/events"
        status, tail = await web.call("GET", f"{path}?limit=3")
        assert status == 200
        assert (tail["first"], tail["last"]) == (final - 2, final)
        assert tail["events"] == stream.events_of_sequences(range(final - 2, final + 1))
        _, older = await web.call("GET", f"{path}?limit=3&before={final - 2}")
        assert [int(e["sequence"]) for e in older["events"]] == [final - 5, final - 4, final - 3]
        _, oldest = await web.call("GET", f"{path}?limit=500&before=3")
        assert ([int(e["sequence"]) for e in oldest["events"]], oldest["first"]) == ([1, 2], 1)
        _, none = await web.call("GET", f"{path}?before=1")
        assert none["events"] == []
        status, refused = await web.call("GET", f"{path}?limit=many")
        assert (status, refused["error"]["code"]) == (400, "INVALID_REQUEST")
        # Resuming from any sequence: exactly what follows it.
        later = await web.stream(session_id, after=final - 3)
        await asyncio.wait_for(later.caught_up.wait(), 30)
        assert later.sequences == [final - 2, final - 1, final]
        await later.close()
        await stream.close()
    finally:
        await observer.close()
        await web.close()
    await web_daemon.daemon.stop()
    database = web_daemon.daemon.config.data_dir / "daemon.db"
    with sqlite3.connect(database) as db:
        actors = db.execute(
            "SELECT actor_id FROM audit_log WHERE event_type = 'permission_grant'"
        ).fetchall()
    assert actors == [("web-phone",)]


def start_refused(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_SOCKET": str(tmp_path / "sock" / "daemon.sock"),
    }
    command = [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"]
    return subprocess.run(
        [*command, "--no-import", *flags], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_non_loopback_address_without_tls_is_refused_with_65(tmp_path: Path) -> None:
    done = start_refused(tmp_path, "--http", "0.0.0.0:8484")
    assert done.returncode == 65, done.stderr
    assert "daemon.http" in done.stderr
    assert "TLS" in done.stderr
    assert not (tmp_path / "data").exists()


def test_unusable_tls_files_or_a_taken_port_are_refused_before_serving(
    tmp_path: Path, claude_bin: Path
) -> None:
    missing = str(tmp_path / "missing.pem")
    bad_tls = ("--claude-bin", str(claude_bin), "--http", "0.0.0.0:0")
    done = start_refused(
        tmp_path / "a", *bad_tls, "--http-tls-cert", missing, "--http-tls-key", missing
    )
    assert done.returncode == 65, done.stderr
    assert "cannot be used" in done.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        flags = ("--claude-bin", str(claude_bin), "--http", f"127.0.0.1:{port}")
        done = start_refused(tmp_path / "b", *flags)
    assert done.returncode == 69, done.stderr
    assert "cannot listen" in done.stderr
    assert not (tmp_path / "b" / "sock" / "daemon.sock").exists()


async def test_the_link_devices_and_rotation_from_the_command_line(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    config_dir = web_daemon.config_dir
    data_dir = web_daemon.daemon.config.data_dir
    env = {**os.environ, "BETCODE_CONFIG_DIR": str(config_dir), "BETCODE_DATA_DIR": str(data_dir)}

    async def betcode(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "betcode.cli.main", *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        return process.returncode or 0, out.decode(), err.decode()

    code, out, err = await betcode("web", "--print-url")
    assert code == 0, err
    base, link = out.strip().split("/#link=")
    assert base == web_daemon.url
    assert web_daemon.token not in out
    assert "once, within 10 minutes" in err
    stranger = WebClient(web_daemon.url, "")
    try:
        status, device = await stranger.call(
            "POST", "/api/devices/pair", {"link": link, "name": "phone"}
        )
        assert status == 201
    finally:
        await stranger.close()
    code, out, _ = await betcode("web", "devices")
    assert code == 0
    assert f"{device['device_id']}  signed in" in out
    assert out.rstrip().endswith("phone")
    code, out, _ = await betcode("daemon", "status", "--socket", str(web_daemon.socket))
    assert f"serving on {web_daemon.url}" in out, out

    phone = WebClient(web_daemon.url, device["credential"], "web-phone")
    try:
        silent = await phone.stream(await phone.create_session(str(workspace.repo)))
        await asyncio.wait_for(silent.caught_up.wait(), 30)
        code, out, _ = await betcode("web", "revoke", device["device_id"])
        assert code == 0
        assert "revoked" in out
        await asyncio.wait_for(silent.closed(), 1.0)
        code, _, err = await betcode("web", "revoke", device["device_id"])
        assert code == 1
        assert "no signed-in device" in err
    finally:
        await phone.close()

    owner = web_daemon.client("web-owner")
    try:
        silent = await owner.stream(await owner.create_session(str(workspace.repo)))
        await asyncio.wait_for(silent.caught_up.wait(), 30)
        old = web_daemon.token
        code, out, _ = await betcode("web", "rotate-token")
        assert code == 0
        assert "every device is signed out" in out
        assert web_daemon.token != old
        await asyncio.wait_for(silent.closed(), 1.0)
    finally:
        await owner.close()
    await web_daemon.daemon.stop()  # the address file goes with the server
    code, _, err = await betcode("web", "--print-url")
    assert code == 1
    assert "--http 127.0.0.1:PORT" in err


def test_a_daemon_killed_with_sigkill_leaves_no_dead_link(tmp_path: Path) -> None:
    fake = make_fake_claude(tmp_path / "fake", {})
    env = daemon_process_env(tmp_path, fake, os.environ)
    daemon = DaemonProcess(tmp_path, env, args=("--no-import", "--http", "127.0.0.1:0"))

    def web_link() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "betcode.cli.main", "web", "--print-url"]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    daemon.start()
    try:
        alive = web_link()
        assert alive.returncode == 0, alive.stderr
        assert alive.stdout.startswith("http://127.0.0.1:")
        daemon.kill9()
    finally:
        daemon.stop()
    assert (tmp_path / "data" / "web-address").exists()  # a SIGKILL leaves it behind
    dead = web_link()
    assert dead.returncode == 1
    assert dead.stdout == ""
    assert f"no daemon runs on the data dir {tmp_path / 'data'}" in dead.stderr

    daemon.args = ("--no-import",)  # a daemon again, without the web client
    daemon.start()
    try:
        stale = web_link()
        command = [sys.executable, "-m", "betcode.cli.main", "web", "devices"]
        devices = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    finally:
        daemon.stop()
    assert stale.returncode == 1
    assert stale.stdout == ""
    assert "serves no web client now" in stale.stderr
    # Asked on its socket, it has no sign-ins to give either (WebAccessService not served).
    assert devices.returncode == 1
    assert "serves no web client (no LAN address, no relay)" in devices.stderr


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key, made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("SKIPPED LOUDLY: no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_serves_https_with_the_same_credentials(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    tls_files: tuple[Path, Path],
) -> None:
    cert, key = tls_files
    http = HttpSettings(listen="127.0.0.1:0", tls_cert=str(cert), tls_key=str(key))
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    daemon = Daemon(replace(config, settings=DaemonSettings(http=http)))
    await daemon.start()
    try:
        assert daemon.web is not None
        url = daemon.web.url or ""
        assert url.startswith("https://127.0.0.1:")
        token = token_path(config.config_dir).read_text().strip()
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/api/sessions", ssl=False) as response:
                assert response.status == 401
            bearer = {"Authorization": f"Bearer {token}"}
            async with session.get(url + "/api/sessions", ssl=False, headers=bearer) as response:
                assert response.status == 200
            assert len(session.cookie_jar) == 0  # https too: never a cookie
    finally:
        await daemon.stop()


async def test_a_viewing_page_takes_no_lock_and_may_interrupt(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    """A page showing a session does not hold up a terminal `betcode run --session` (it used
    to take the input lock by attaching: the run waited for the transfer timeout, or for ever);
    it may still interrupt the turn another client started; its first message takes the lock
    once it is free."""
    page = web_daemon.client("web-viewer")
    try:
        session_id = await page.create_session(str(workspace.repo))
        stream = await page.stream(session_id, after=0)
        await asyncio.wait_for(stream.caught_up.wait(), 30)
        run = await betcode(
            web_daemon.socket, workspace.repo, "run", "--session", session_id, PLAIN_PROMPT
        )
        assert run.code == 0, run.err
        assert "holds the input lock" not in run.err
        assert "from the terminal" in run.out
        holders = [change.get("holder_client_id") for change in stream.of_kind("input_lock")]
        assert "web-viewer" not in holders

        terminal = Client(web_daemon.socket, "terminal")
        try:
            terminal.converse(agent_pb2.StartConversation(session_id=session_id))
            await terminal.wait_for("session_info")
            terminal.say('SCN:slow {"words": 400, "delay": 0.05} count slowly')
            await stream.until(lambda: "word3 " in _text(stream) or None)
            await stream.send({"cancel": {}})
            done = await terminal.wait_for("turn_complete", count=2)  # 1: the run's turn
            assert done.turn_complete.stop_reason == "cancelled"
            assert stream.of_kind("error") == []
        finally:
            await terminal.close()
        # The terminal is gone and the lock free: the page's first message takes it.
        await stream.say(PLAIN_PROMPT)
        await stream.wait_for("turn_complete", count=3)
        assert stream.of_kind("input_lock")[-1].get("holder_client_id") == "web-viewer"
        await stream.close()
    finally:
        await page.close()


def _text(stream: WebStream) -> str:
    return "".join(delta.get("text", "") for delta in stream.of_kind("text_delta"))


async def test_waiting_requests_are_listed_with_the_rule_allow_for_session_adds(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    page = web_daemon.client()
    try:
        session_id = await page.create_session(str(workspace.repo))
        stream = await page.stream(session_id, after=0)
        await asyncio.wait_for(stream.caught_up.wait(), 30)
        status, listed = await page.call("GET", "/api/permissions")
        assert (status, listed) == (200, {"waiting": []})
        await stream.say(TOOL_PROMPT)
        request = await stream.wait_for("permission_request")
        status, listed = await page.call("GET", "/api/permissions")
        assert status == 200
        [waiting] = listed["waiting"]
        assert waiting["request_id"] == request["request_id"]
        assert waiting["session_id"] == session_id
        assert waiting["tool_name"] == "Bash"
        assert waiting["input"]["command"] == 'python3 -c "print(6 * 7)"'
        assert waiting["is_question"] is False
        assert waiting["session_rule"] == 'Bash(python3 -c "print\\(6 \\* 7\\)")'
        await page.answer(request["request_id"], decision="allow_session")
        await stream.wait_for("turn_complete")
        _, listed = await page.call("GET", "/api/permissions")
        assert listed == {"waiting": []}
        await stream.close()
    finally:
        await page.close()


async def test_sessions_renamed_and_deleted_and_directories_to_pick(
    web_daemon: WebDaemon, workspace: Workspace
) -> None:
    page = web_daemon.client()
    try:
        session_id = await page.create_session(str(workspace.repo))
        status, renamed = await page.call("PATCH", f"/api/sessions/{session_id}", {"name": " x "})
        assert (status, renamed) == (200, {"session_id": session_id, "name": "x"})
        _, listed = await page.call("GET", "/api/sessions")
        assert [s["name"] for s in listed["sessions"]] == ["x"]
        status, body = await page.call("PATCH", f"/api/sessions/{session_id}", {"name": "n" * 201})
        assert (status, body["error"]["code"]) == (400, "INVALID_REQUEST")
        _, directories = await page.call("GET", "/api/directories")
        assert directories["directories"] == [
            {"path": str(workspace.repo), "label": str(workspace.repo), "kind": "recent"}
        ]
        status, deleted = await page.call("DELETE", f"/api/sessions/{session_id}")
        assert (status, deleted) == (200, {"deleted": True})
        status, body = await page.call("DELETE", f"/api/sessions/{session_id}")
        assert (status, body["error"]["code"]) == (404, "SESSION_NOT_FOUND")
        _, listed = await page.call("GET", "/api/sessions")
        assert listed["sessions"] == []
    finally:
        await page.close()
