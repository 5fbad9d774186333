"""Answers for a claude that stops or exits between the check that it waits and the write:
written to no process, and no claude is started for them (a control answer means nothing to
any other process). A client's answer then takes the way of one whose claude is gone.

The fake claude ignores SIGTERM where a test needs claude to stay STOPPING for the kill grace
(FAST: 0.5 s): the window between the check and the write, held open.
"""

from __future__ import annotations

import asyncio
import json
import os

from bridge_world import World, WorldFactory, permission

from betcode.claude.supervisor import SupervisorState
from betcode.config.settings import PermissionSettings
from betcode.devtools.fake_claude_messages import can_use_tool
from betcode.permissions.decisions import ClientAnswer
from betcode.permissions.orphans import NOTE_PREFIX
from betcode.permissions.sweeper import SweepReport
from betcode.sessions.session import Session
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
ASKS_AND_IGNORES_SIGTERM = {"ignore_sigterm": True, "turns": [[permission("Bash", ECHO, "r1")]]}


async def asking_then_stopping(w: World) -> tuple[Session, asyncio.Task[None]]:
    """r1 pending in a new session; then its claude is being stopped (STOPPING)."""
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await w.until("r1 pending", lambda: w.row("r1") and w.bridge.has_pending(session.id))
    stopping = asyncio.create_task(session.supervisor.stop())
    await w.until("stopping", lambda: session.supervisor.state is SupervisorState.STOPPING)
    return session, stopping


async def test_an_expiry_while_claude_stops_is_not_written_and_starts_no_claude(
    world: WorldFactory,
) -> None:
    w = await world(ASKS_AND_IGNORES_SIGTERM, settings=PermissionSettings(ttl_seconds=2))
    session, stopping = await asking_then_stopping(w)
    w.clock.advance(2.5)
    assert await w.bridge.sweep_once() == SweepReport(reminded=0, expired=1)
    await stopping
    assert session.supervisor.state is SupervisorState.IDLE
    assert len(w.starts()) == 1
    assert w.answers_to(session.id, "r1") == []
    row = w.stored("r1")
    assert (row.response_decision, row.delivered) == ("expired", True)
    [resolved] = await w.until("resolved", lambda: w.events(session.id, "permission_resolved"))
    assert resolved.permission_resolved.outcome == "expired"


async def test_an_approval_while_claude_stops_reaches_the_resumed_claude_as_a_one_shot_grant(
    world: WorldFactory,
) -> None:
    w = await world(
        {"runs": [ASKS_AND_IGNORES_SIGTERM, {"turns": [[{"do": "text", "text": "ok"}]]}]}
    )
    session, stopping = await asking_then_stopping(w)
    outcome = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    await stopping
    assert (outcome.accepted, outcome.duplicate, outcome.outcome) == (True, False, "allowed")
    # Never written to a process: not to the stopping one, not to the one the note started.
    assert w.answers_to(session.id, "r1") == []
    [note] = await w.until("the note", lambda: w.user_texts(session.id)[1:])
    assert note.startswith(f"{NOTE_PREFIX}the user approved")
    [_, resumed] = await w.until("claude resumed", lambda: w.starts()[1:] and w.starts())
    assert "--resume" in resumed["argv"]
    # Undelivered: the approval waits for the resumed claude's call, and runs at most once.
    row = w.stored("r1")
    assert (row.response_decision, row.delivered) == ("allow_once", False)


async def test_a_rule_answers_no_claude_when_the_one_that_asked_exited_meanwhile(
    world: WorldFactory,
) -> None:
    asks_and_exits = [
        {"do": "raw", "text": json.dumps(can_use_tool("r1", "Bash", ECHO, "toolu_1"))},
        {"do": "exit", "code": 0},
    ]
    w = await world({"turns": [asks_and_exits]})
    # The rules are read on the first request: from a FIFO, until the test writes them, which
    # it does once claude has exited.
    rules = w.workdir / ".claude" / "settings.local.json"
    os.mkfifo(rules)
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await w.until("claude exited", lambda: session.supervisor.state is SupervisorState.IDLE)
    await asyncio.to_thread(rules.write_text, json.dumps({"permissions": {"allow": ["Bash"]}}))
    # The exit is judged after the request line (one queue, in order): its answer was tried.
    await w.until("the turn ended", lambda: not session.turn_active)

    assert session.supervisor.state is SupervisorState.IDLE
    assert len(w.starts()) == 1
    assert w.answers_to(session.id, "r1") == []
