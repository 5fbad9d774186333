"""The audit trail and the session limit through a real daemon (fake claude, real socket, real
database file): daemon.max_sessions=2 refuses a third session with RESOURCE_EXHAUSTED;
sessions (created, deleted) and decisions land in audit_log (also with the real CLI); a
database without audit_log stops the daemon at startup (STO-05)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness.daemon import (
    Client,
    DaemonProcess,
    accepts_connections,
    daemon_config,
    daemon_process_env,
)
from harness.environment import Workspace

from betcode.composition.startup_checks import EXIT_STORAGE_UNUSABLE
from betcode.core.errors import error_details_of
from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
SCRIPT = {
    "turns": [
        [{"do": "permission", "tool_name": "Bash", "input": ECHO, "request_id": "r1"}],
        [{"do": "text", "text": "hello again"}],
    ]
}


class World:
    def __init__(self, root: Path, **env: str) -> None:
        self.root = root
        self.repo = root / "repo"
        self.repo.mkdir()
        fake = make_fake_claude(root / "fake", SCRIPT)
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home")}
        self.env = {**daemon_process_env(root, fake, base), **env}
        self.daemon = DaemonProcess(root, self.env)
        self.clients: list[Client] = []

    @property
    def db_path(self) -> Path:
        return self.root / "data" / "daemon.db"

    async def session(self, client_id: str) -> Client:
        client = Client(self.daemon.socket, client_id)
        self.clients.append(client)
        client.converse(agent_pb2.StartConversation(working_directory=str(self.repo)))
        await client.wait_for("session_info")
        return client

    def audit(self) -> list[dict[str, Any]]:
        return self.read_audit(self.db_path)

    @staticmethod
    def read_audit(db_path: Path) -> list[dict[str, Any]]:
        conn = sqlite3.connect(db_path)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute("SELECT * FROM audit_log ORDER BY id")]
        finally:
            conn.close()

    async def shutdown(self) -> int:
        for client in self.clients:
            await client.close()
        self.clients.clear()
        return self.daemon.stop()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Callable[..., World]]:
    made: list[World] = []

    def build(**env: str) -> World:
        made.append(World(tmp_path, **env))
        return made[-1]

    yield build
    for built in made:
        await built.shutdown()


async def refused_start(socket: Path, repo: Path) -> grpc.aio.AioRpcError:
    """Open a Converse that creates a session; return the error the daemon ends it with."""
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        start = agent_pb2.AgentRequest(
            start=agent_pb2.StartConversation(working_directory=str(repo))
        )
        call = stub.Converse(iter([start]), metadata=(("x-client-id", "third"),))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in call:
                pass
        return raised.value


async def test_max_sessions_2_refuses_a_third_session_and_leaves_the_others_working(
    world: Callable[..., World],
) -> None:
    w = world(BETCODE_MAX_SESSIONS="2")
    w.daemon.start()
    first, second = await w.session("first"), await w.session("second")
    error = await refused_start(w.daemon.socket, w.repo)
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "daemon.max_sessions is 2" in (error.details() or "")
    assert "BETCODE_MAX_SESSIONS" in (error.details() or "")
    assert error_details_of(error).get("max_sessions") == "2"
    # The two sessions go on: a permission is asked, answered, and the tool runs.
    first.say("say hi")
    request = await first.wait_for("permission_request")
    first.answer(request.permission_request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    await first.wait_for("turn_complete")
    observer = Client(w.daemon.socket, "observer")  # attaching to an existing one is fine
    w.clients.append(observer)
    observer.resume(second.session_id)
    await observer.wait_for("session_info")
    async with grpc.aio.insecure_channel(f"unix:{w.daemon.socket}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        delete = agent_pb2.DeleteSessionRequest(session_id=second.session_id)
        await stub.DeleteSession(delete, metadata=(("x-client-id", "janitor"),))
    assert await w.shutdown() == 0
    rows = w.audit()
    creates = [
        (r["outcome"], r["actor_id"], r["session_id"])
        for r in rows
        if r["event_type"] == "session_create"
    ]
    assert sorted(creates, key=str) == sorted(
        [
            ("success", "first", first.session_id),
            ("success", "second", second.session_id),
            ("denied", "third", None),
        ],
        key=str,
    )
    [grant] = [r for r in rows if r["event_type"] == "permission_grant"]
    assert (grant["actor_id"], grant["session_id"], grant["tool_input_preview"]) == (
        "first",
        first.session_id,
        "echo hi",
    )
    assert json.loads(grant["context"])["decision"] == "allow_once"
    # The deleted session's trail outlives it, and its end is in it.
    [complete] = [r for r in rows if r["event_type"] == "session_complete"]
    assert (complete["actor_id"], complete["session_id"], complete["outcome"]) == (
        "janitor",
        second.session_id,
        "success",
    )
    assert json.loads(complete["context"]) == {"reason": "deleted"}
    assert [r["session_id"] for r in rows if r["event_type"] == "session_create"].count(
        second.session_id
    ) == 1


def start_foreground(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_database_without_audit_log_stops_the_daemon_at_startup(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.daemon.start()
    assert w.daemon.stop() == 0
    conn = sqlite3.connect(w.db_path)
    conn.execute("DROP TABLE audit_log")
    conn.close()
    done = start_foreground(w.env)
    assert done.returncode == EXIT_STORAGE_UNUSABLE
    assert f"the database {w.db_path} has no audit_log table" in done.stderr
    assert "Traceback" not in done.stderr
    assert not accepts_connections(w.daemon.socket)


def test_a_database_that_is_not_one_stops_the_daemon_at_startup(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.db_path.parent.mkdir(parents=True)
    w.db_path.write_bytes(b"this is not a SQLite database, it is a text file\n" * 100)
    done = start_foreground(w.env)
    assert done.returncode == EXIT_STORAGE_UNUSABLE
    assert f"the database {w.db_path} failed its integrity check" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.real_cli
async def test_real_cli_a_call_allowed_by_rule_is_audited_with_its_command(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(python3:*)"]}})
    )
    config = daemon_config(
        tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url), config_dir=config_dir
    )
    daemon = Daemon(config)
    await daemon.start()
    client = Client(config.socket_path, "real-client")
    try:
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        client.say("SCN:tool_bash run it")
        await client.wait_for("turn_complete")
        session_id = client.session_id
    finally:
        await client.close()
        await daemon.stop()
    rows = World.read_audit(config.data_dir / "daemon.db")
    [create] = [r for r in rows if r["event_type"] == "session_create"]
    assert (create["actor_id"], create["session_id"]) == ("real-client", session_id)
    [allowed] = [r for r in rows if r["event_type"] == "auto_approve_tool_call"]
    assert (allowed["session_id"], allowed["tool_name"]) == (session_id, "Bash")
    assert allowed["tool_input_preview"] == "python3 -c \"print('hello-from-bash')\""
    assert len(allowed["tool_input_hash"]) == 64
    assert json.loads(allowed["context"])["reason"].startswith("Bash(python3:*) (from ")
