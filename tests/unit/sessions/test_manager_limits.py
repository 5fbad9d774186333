"""The session manager's limit (daemon.max_sessions: sessions in use at once), the session
lifecycle it audits (session_create, session_resume, session_error) and the turn ends it hands
to the attention log (TOP-06), on real parts: a database file, the store writer, the
permission bridge, and the scripted fake claude."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.claude.supervisor import SupervisorState
from betcode.devtools.fake_claude import make_fake_claude
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.rulebook import RuleBook
from betcode.sessions.attention import Attention, AttentionLog
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.fanout import Frame
from betcode.sessions.manager import InvalidSessionRequest, SessionLimitReached, SessionManager
from betcode.sessions.session import Session
from betcode.storage import StoreReader, StoreWriter, open_database

POLICY = SupervisorPolicy(
    backoff_initial=0.02,
    backoff_max=0.05,
    max_crashes=2,
    watchdog_seconds=60.0,
    kill_grace_seconds=0.5,
    idle_reap_seconds=None,
)
HELLO = [[{"do": "text", "text": "hello"}]]


@dataclass
class Parts:
    manager: SessionManager
    db_path: Path
    workdir: Path

    async def new(self, client_id: str | None = None) -> Session:
        return await self.manager.create(working_directory=str(self.workdir), client_id=client_id)

    def sql(self, query: str, *args: object) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db_path)
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def audit(self, event_type: str) -> list[dict[str, Any]]:
        names = ("session_id", "actor_type", "actor_id", "outcome", "severity", "error_code")
        rows = self.sql(
            f"SELECT {', '.join(names)}, error_message, context FROM audit_log "
            "WHERE event_type = ? ORDER BY id",
            event_type,
        )
        return [dict(zip((*names, "error_message", "context"), row, strict=True)) for row in rows]


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """`await parts(max_sessions, script)`: a manager over a fresh database."""
    opened: list[tuple[SessionManager, PermissionBridge, StoreWriter, StoreReader]] = []

    async def build(max_sessions: int | None, script: dict[str, Any] | None = None) -> Parts:
        (tmp_path / "project").mkdir()
        database = open_database(tmp_path / "daemon.db")
        writer, reader = StoreWriter(database), StoreReader(database)
        bridge = PermissionBridge(writer, reader, rules=RuleBook(tmp_path / "config"))
        fake = make_fake_claude(tmp_path / "fake", script or {"turns": HELLO})
        context = SessionContext(
            writer=writer,
            reader=reader,
            claude_binary=ClaudeBinary(fake, BinarySource.FLAG),
            child_env=lambda: {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            process_policy=POLICY,
            permissions=bridge,
            settings=SessionSettings(),
        )
        manager = SessionManager(context, max_sessions=max_sessions)
        opened.append((manager, bridge, writer, reader))
        return Parts(manager, tmp_path / "daemon.db", tmp_path / "project")

    yield build
    for manager, bridge, writer, reader in opened:
        await manager.shutdown()
        await bridge.close()
        await writer.close()
        reader.close()


async def attach(session: Session, client_id: str) -> AsyncIterator[list[Frame]]:
    """A client attached to `session` and reading (it got the replayed history)."""
    stream = session.attach(client_id, 0, max_count=64, max_bytes=1 << 20)
    await anext(stream)
    return stream


async def until(what: str, check: Callable[[], object]) -> None:
    async with asyncio.timeout(20):  # guards against a hang; measures nothing
        while not check():  # noqa: ASYNC110 - plain state, no event to wait on
            await asyncio.sleep(0.01)


# ---- daemon.max_sessions ----


async def test_a_session_beyond_the_limit_is_refused_and_the_others_are_unaffected(
    parts: Callable[..., Any],
) -> None:
    p: Parts = await parts(2)
    first, second = await p.new("c1"), await p.new("c2")
    streams = [await attach(first, "c1"), await attach(second, "c2")]
    with pytest.raises(SessionLimitReached) as refused:
        await p.new("c3")
    message = str(refused.value)
    assert "2 sessions are in use" in message
    assert "daemon.max_sessions is 2" in message
    assert "BETCODE_MAX_SESSIONS" in message
    assert (refused.value.limit, refused.value.in_use) == (2, 2)
    assert p.sql("SELECT COUNT(*) FROM sessions") == [(2,)]
    # Existing sessions: another client attaches, and a turn runs.
    assert await p.manager.get(first.id) is first
    streams.append(await attach(first, "c4"))
    await first.send_user_message("c1", "hi")
    await until(
        "the turn's end",
        lambda: (
            p.sql("SELECT status FROM sessions WHERE id = ?", first.id) == [("idle",)]
            and not first.turn_active
        ),
    )
    denied = [row for row in p.audit("session_create") if row["outcome"] == "denied"]
    assert len(denied) == 1
    assert (denied[0]["actor_id"], denied[0]["error_code"], denied[0]["severity"]) == (
        "c3",
        "POOL_EXHAUSTED",
        "warn",
    )
    assert json.loads(denied[0]["context"])["max_sessions"] == "2"
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


async def test_a_session_without_clients_or_claude_gives_its_place_back(
    parts: Callable[..., Any],
) -> None:
    p: Parts = await parts(1)
    first = await p.new()
    stream = await attach(first, "c1")
    with pytest.raises(SessionLimitReached):
        await p.new()
    await stream.aclose()  # type: ignore[attr-defined]
    assert p.manager.in_use() == 0
    await p.new()


async def test_a_session_whose_claude_runs_counts_without_any_client(
    parts: Callable[..., Any],
) -> None:
    p: Parts = await parts(1)
    first = await p.new()
    await first.send_user_message(None, "hi")  # claude stays up between turns
    assert first.supervisor.state is SupervisorState.RUNNING
    with pytest.raises(SessionLimitReached):
        await p.new()
    await first.supervisor.stop()
    await p.new()


async def test_creates_racing_for_the_last_place_get_it_once(parts: Callable[..., Any]) -> None:
    p: Parts = await parts(2)
    made = await asyncio.gather(*(p.new() for _ in range(3)), return_exceptions=True)
    assert [type(result).__name__ for result in made] == [
        "AuditedSession",
        "AuditedSession",
        "SessionLimitReached",
    ]


async def test_without_a_limit_nothing_is_refused(parts: Callable[..., Any]) -> None:
    p: Parts = await parts(None)
    streams = [await attach(await p.new(), f"c{n}") for n in range(5)]
    assert p.manager.in_use() == 5
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


async def test_a_new_limit_applies_to_the_next_create(parts: Callable[..., Any]) -> None:
    p: Parts = await parts(3)
    streams = [await attach(await p.new(), "c1"), await attach(await p.new(), "c2")]
    p.manager.max_sessions = 2
    with pytest.raises(SessionLimitReached, match=r"daemon\.max_sessions is 2"):
        await p.new()
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


# ---- the audited lifecycle ----


async def test_session_create_is_audited_with_the_asking_client(parts: Callable[..., Any]) -> None:
    p: Parts = await parts(None)
    session = await p.new("client-7")
    await until("the audit row", lambda: p.audit("session_create"))
    [row] = p.audit("session_create")
    assert (row["session_id"], row["actor_type"], row["actor_id"], row["outcome"]) == (
        session.id,
        "user",
        "client-7",
        "success",
    )
    assert json.loads(row["context"]) == {"working_directory": str(p.workdir.resolve())}


async def test_a_respawn_with_resume_and_the_final_crash_are_audited(
    parts: Callable[..., Any], tmp_path: Path
) -> None:
    # Start 1 plays a turn (claude's session id becomes known); every later start dies at once.
    starts = tmp_path / "starts.jsonl"  # the fake counts its starts here
    script = {
        "log": str(starts),
        "runs": [{"turns": HELLO}, {"startup": [{"do": "exit", "code": 3}]}],
    }
    p: Parts = await parts(None, script)
    session = await p.new()
    await session.send_user_message(None, "hi")
    await until("claude's session id", lambda: session.claude_session_id)
    await until("the turn's end", lambda: not session.turn_active)
    assert p.audit("session_resume") == []  # the first start resumed nothing
    pid = session.supervisor.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # crash 1: respawned with --resume, which dies: crash 2
    await until("CRASHED", lambda: session.supervisor.state is SupervisorState.CRASHED)
    await until("the error row", lambda: p.audit("session_error"))
    resumed = p.audit("session_resume")
    assert len(resumed) == 1
    assert (resumed[0]["session_id"], resumed[0]["actor_type"]) == (session.id, "daemon")
    assert json.loads(resumed[0]["context"]) == {"claude_session_id": session.claude_session_id}
    [error] = p.audit("session_error")
    assert (error["outcome"], error["severity"], error["error_code"]) == (
        "failure",
        "error",
        "SUBPROCESS_CRASHED",
    )
    assert "2 crashes within" in error["error_message"]


# ---- client-chosen ids ----


async def test_a_new_uuid_makes_one_session_with_that_id_however_many_race(
    parts: Callable[..., Any],
) -> None:
    p: Parts = await parts(None)
    chosen = "0B7E2C1A-5d43-4f6e-9a21-3c8d2e4f5a6b"  # kept as the client spelled it
    opened = await asyncio.gather(
        *(
            p.manager.get_or_create(chosen, working_directory=str(p.workdir), client_id=f"c{n}")
            for n in range(5)
        )
    )
    assert {session.id for session, _ in opened} == {chosen}
    assert len({id(session) for session, _ in opened}) == 1
    assert [created for _, created in opened].count(True) == 1
    assert p.sql("SELECT id FROM sessions") == [(chosen,)]
    again, created = await p.manager.get_or_create(chosen, working_directory="")
    assert (again, created) == (opened[0][0], False)


@pytest.mark.parametrize("chosen", ["abc", "0b7e2c1a5d434f6e9a213c8d2e4f5a6b", "g" * 36])
async def test_a_new_id_that_is_not_a_uuid_is_refused_and_nothing_is_made(
    parts: Callable[..., Any], chosen: str
) -> None:
    p: Parts = await parts(None)
    with pytest.raises(InvalidSessionRequest, match="must be a UUID"):
        await p.manager.get_or_create(chosen, working_directory=str(p.workdir))
    assert p.sql("SELECT COUNT(*) FROM sessions") == [(0,)]


# ---- what needs a human (TOP-06): every session the manager brings alive is watched ----


async def test_turn_ends_reach_the_attention_log_unless_the_input_lock_is_held(
    parts: Callable[..., Any],
) -> None:
    script = {"turns": [HELLO[0], HELLO[0], [{"do": "exit", "code": 3}]]}
    p: Parts = await parts(None, script)
    attention = AttentionLog()
    p.manager.on_register.append(attention.watch)
    session = await p.new()

    await session.send_user_message(None, "hi")  # nobody attached: nobody holds the lock
    await until(
        "the turn's end", lambda: session.turn_active is False and session.claude_session_id
    )
    [finished] = attention.take()
    assert (finished.kind, finished.session_id, finished.title) == (
        "turn_finished",
        session.id,
        "project",
    )

    stream = await attach(session, "c1")  # c1 holds the lock through the next turn
    await session.send_user_message("c1", "again")
    await until("the second turn's end", lambda: session.turn_active is False)
    assert attention.take() == []
    await stream.aclose()  # type: ignore[attr-defined]
    await until("the lock is free", lambda: session.lock.holder is None)

    await session.send_user_message(None, "and again")  # claude exits in the middle of it
    noted: list[Attention] = []

    def noted_so_far() -> list[Attention]:
        noted.extend(attention.take())
        return noted

    await until("the error", noted_so_far)
    assert [(n.kind, n.session_id) for n in noted] == [("error", session.id)]
    assert len({finished.notification_id, noted[0].notification_id}) == 2
