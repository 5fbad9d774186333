"""cli/connection: address resolution, the named errors and the typed client, against the fake
AgentService on a real Unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat_fake_daemon import SESSION_ID, FakeAgentService
from harness.forwarding import carry

from betcode.cli.connection import (
    MAX_CLIENT_ID_CHARS,
    DaemonAddress,
    DaemonClient,
    DaemonUnavailable,
    SessionNotFound,
    check_daemon_listening,
    client_label,
    client_owner,
    make_client_id,
    other_client_label,
    resolve_daemon_address,
)
from betcode.v1 import agent_pb2, common_pb2


class TestClientIdentity:
    def test_an_id_names_user_and_host_and_differs_per_process(self) -> None:
        first = make_client_id("ann", "desk", 1234)
        assert first.startswith("cli:ann@desk:1234-")
        assert make_client_id("ann", "desk", 1234) != first  # two clients of one process too
        assert client_owner(first) == "ann@desk"

    def test_odd_or_long_names_still_make_a_short_printable_id(self) -> None:
        client_id = make_client_id("Jöns Ek:" + "x" * 300, "host name@lan", 4_294_967_295)
        assert len(client_id) <= MAX_CLIENT_ID_CHARS
        assert client_id.isascii()
        assert client_id.isprintable()
        assert " " not in client_id
        owner = client_owner(client_id)
        assert owner is not None
        assert owner.startswith("J-ns-Ek-xxx")
        assert owner.endswith("@host-name-lan")
        assert make_client_id("", "", 1).startswith("cli:unknown@unknown:1-")

    @pytest.mark.parametrize(
        "client_id", ["cli-desk-1234-abcdef", "anon-5f0e", "cli:no-host:1-a", "cli:", ""]
    )
    def test_other_ids_have_no_owner(self, client_id: str) -> None:
        assert client_owner(client_id) is None

    @pytest.mark.parametrize(
        ("client_id", "label"),
        [
            ("cli:ann@desk:1-aaaaaaaa", "you"),
            ("cli:ann@desk:2-bbbbbbbb", "you"),
            ("cli:bob@desk:1-aaaaaaaa", "bob@desk"),
            ("cli:ann@laptop:1-aaaaaaaa", "ann@laptop"),
            ("flutter-phone", "flutter-phone"),
        ],
    )
    def test_labels_say_you_for_the_same_user_and_host(self, client_id: str, label: str) -> None:
        assert client_label(client_id, "cli:ann@desk:1-aaaaaaaa") == label

    def test_an_id_of_another_form_is_you_only_when_identical(self) -> None:
        assert client_label("cli-me", "cli-me") == "you"
        assert client_label("cli-me", "cli-you") == "cli-me"

    @pytest.mark.parametrize(
        ("client_id", "label"),
        [
            ("cli:ann@desk:1-aaaaaaaa", "you"),
            ("cli:ann@desk:2-bbbbbbbb", "you, in another terminal"),
            ("cli:bob@desk:1-aaaaaaaa", "bob@desk"),
            ("flutter-phone", "flutter-phone"),
        ],
    )
    def test_another_terminal_of_the_same_user_is_named_so(
        self, client_id: str, label: str
    ) -> None:
        assert other_client_label(client_id, "cli:ann@desk:1-aaaaaaaa") == label


class TestAddress:
    @pytest.fixture(autouse=True)
    def clean_environment(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        for name in ("BETCODE_SOCKET", "XDG_RUNTIME_DIR"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("BETCODE_CONFIG_DIR", str(tmp_path / "config"))

    def test_explicit_socket_wins(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("BETCODE_SOCKET", "/elsewhere.sock")
        address = resolve_daemon_address(tmp_path / "my.sock")
        assert address == DaemonAddress(tmp_path / "my.sock", "--socket")
        assert address.target == f"unix:{tmp_path / 'my.sock'}"

    def test_environment_socket(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("BETCODE_SOCKET", "/tmp/b.sock")
        monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1")
        assert resolve_daemon_address() == DaemonAddress(Path("/tmp/b.sock"), "BETCODE_SOCKET")

    def test_runtime_dir(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1")
        address = resolve_daemon_address()
        assert address == DaemonAddress(Path("/run/user/1/betcode/daemon.sock"), "default")

    def test_config_dir_last(self, tmp_path: Path) -> None:
        assert resolve_daemon_address().path == tmp_path / "config" / "daemon.sock"


class TestDaemonUnavailable:
    async def test_missing_socket_says_how_to_start_the_daemon(self, tmp_path: Path) -> None:
        address = DaemonAddress(tmp_path / "none.sock", "BETCODE_SOCKET")
        with pytest.raises(DaemonUnavailable, match="betcode daemon start") as caught:
            await DaemonClient.connect(address)
        assert "no daemon socket" in str(caught.value)
        assert caught.value.exit_code == 2

    async def test_stale_socket_is_refused_at_once(self, socket_path: Path) -> None:
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(socket_path))  # a socket file nobody listens on
        stale.close()
        with pytest.raises(DaemonUnavailable, match="nothing listens"):
            await check_daemon_listening(DaemonAddress(socket_path, "test"))


@contextlib.asynccontextmanager
async def slow_to_greet(target: Path, listen: Path, delay: float) -> AsyncIterator[None]:
    """A socket in front of ``target`` that holds each connection ``delay`` seconds before
    passing bytes either way: a daemon too busy to send its HTTP/2 SETTINGS at once."""

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(delay)
        upstream_reader, upstream_writer = await asyncio.open_unix_connection(target)
        await asyncio.gather(carry(reader, upstream_writer), carry(upstream_reader, writer))

    server = await asyncio.start_unix_server(relay, listen)
    try:
        yield
    finally:
        server.close()


class TestSlowDaemon:
    async def test_a_daemon_slow_to_answer_a_new_connection_is_waited_for(
        self, server: object, socket_path: Path
    ) -> None:
        # A loaded daemon may take a second or more to greet; the channel's connect deadline
        # must not be its 100 ms reconnect backoff (that failed CLI calls under CI load).
        slow = socket_path.with_name("slow.sock")
        async with slow_to_greet(socket_path, slow, delay=1.5):
            client = await DaemonClient.connect(DaemonAddress(slow, "test"), client_id="cli-me")
            try:
                assert await client.delete_session(SESSION_ID) is True
            finally:
                await client.close()


class TestTypedCalls:
    async def test_unary_calls_carry_the_client_id(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        assert await client.delete_session(SESSION_ID) is True
        await client.rename_session(SESSION_ID, "refactor")
        grants = await client.list_session_grants(SESSION_ID)
        pending = await client.list_pending_permissions(SESSION_ID)
        answer = await client.answer_permission(
            agent_pb2.AnswerPermissionRequest(
                request_id="req-9", decision=common_pb2.PERMISSION_DECISION_ALLOW_ONCE
            )
        )
        lock = await client.request_input_lock(SESSION_ID)
        assert [g.tool_name for g in grants] == ["Bash(git *)"]
        assert [p.request_id for p in pending] == ["req-9"]
        assert answer.outcome == "allowed"
        assert lock.granted
        methods = [method for method, _ in fake.unary]
        assert methods == [
            "DeleteSession",
            "RenameSession",
            "ListSessionGrants",
            "ListPendingPermissions",
            "AnswerPermission",
            "RequestInputLock",
        ]
        assert fake.unary[-1][1][0] == "cli-me"

    async def test_not_found_is_session_not_found(self, client: DaemonClient) -> None:
        with pytest.raises(SessionNotFound, match="no session nope") as caught:
            await client.cancel_turn("nope")
        assert caught.value.exit_code == 6

    async def test_most_recent_session_in_a_directory(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        for name, cwd, updated in [("a", "/w", 10), ("b", "/w", 30), ("c", "/x", 50)]:
            summary = agent_pb2.SessionSummary(id=name, working_directory=cwd)
            summary.updated_at.FromSeconds(updated)
            fake.sessions.append(summary)
        latest = await client.most_recent_session("/w")
        assert latest is not None
        assert latest.id == "b"
        assert await client.most_recent_session("/nowhere") is None
