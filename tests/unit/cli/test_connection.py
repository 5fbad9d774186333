"""cli/connection: address resolution, the named errors and the typed client, against the fake
AgentService on a real Unix socket."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from chat_fake_daemon import SESSION_ID, FakeAgentService

from betcode.cli.connection import (
    DaemonAddress,
    DaemonClient,
    DaemonUnavailable,
    SessionNotFound,
    check_daemon_listening,
    resolve_daemon_address,
)
from betcode.v1 import agent_pb2, common_pb2


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
