"""Answers that arrive after the claude process that asked is gone (claude crashed, the daemon
restarted): never lost, and an approved operation runs exactly once.

The fake claude plays one script per start (`runs`), so a test can say what the resumed
process does after it is told about the answer.
"""

from __future__ import annotations

import json
import os
import signal

from bridge_world import World, WorldFactory, permission

from betcode.permissions.decisions import ClientAnswer
from betcode.sessions.session import Session
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
ECHO_AGAIN = {"command": "echo hi", "description": "Retry the approved call"}
EDITED = {"command": "echo edited"}


def runs(*turns_per_start: list[list[dict[str, object]]]) -> dict[str, object]:
    return {"runs": [{"turns": turns} for turns in turns_per_start]}


def text(words: str) -> dict[str, object]:
    return {"do": "text", "text": words}


async def ask_then_restart_daemon(w: World) -> Session:
    """r1 pending in a new session; then the daemon restarts: the session is loaded again."""
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await w.until("r1 pending", lambda: w.row("r1"))
    await w.restart()
    return await w.manager.get(session.id)


def results_out(w: World, session_id: str) -> int:
    return len(w.lines(session_id, "out", "result"))


async def test_after_a_claude_crash_an_approval_runs_once_in_the_resumed_process(
    world: WorldFactory,
) -> None:
    w = await world(
        runs(
            [[permission("Bash", ECHO, "r1")]],
            [[permission("Bash", ECHO_AGAIN, "r2")], [permission("Bash", ECHO, "r3")]],
        )
    )
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await w.until("r1 pending", lambda: w.row("r1") and w.bridge.has_pending(session.id))
    asked_by = session.supervisor.pid
    assert asked_by is not None
    os.kill(asked_by, signal.SIGKILL)
    await w.until("claude restarted", lambda: session.supervisor.pid not in (None, asked_by))
    # The new process is not waiting for anything: the watchdog and reaper must not think so.
    assert not w.bridge.has_pending(session.id)

    outcome = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    assert (outcome.duplicate, outcome.outcome) == (False, "allowed")
    assert await w.until("the tool ran", lambda: w.tool_results(session.id)) == ["Bash ran"]
    [note] = w.user_texts(session.id)[1:]
    assert note.startswith("[BetCode] While you were restarting, the user approved")
    assert '"command": "echo hi"' in note
    [allow] = w.answers_to(session.id, "r2")
    assert allow["response"] == {"behavior": "allow", "updatedInput": ECHO}
    assert w.answers_to(session.id, "r1") == []  # nobody was left to receive it
    assert w.stored("r1").delivered
    assert "--resume" in w.starts()[1]["argv"]

    await session.send_user_message(None, "once more")
    await w.until("r3 forwarded, not allowed again", lambda: w.row("r3"))
    assert w.answers_to(session.id, "r3") == []
    assert w.bridge.metrics.snapshot()["user_allow"] == 1
    assert w.bridge.metrics.snapshot()["auto_allow"] == 0


async def test_an_approval_survives_two_daemon_restarts_and_runs_exactly_once(
    world: WorldFactory,
) -> None:
    w = await world(
        runs(
            [[permission("Bash", ECHO, "r1")]],
            [[text("I will retry later.")]],
            [[permission("Bash", ECHO, "r2")], [permission("Bash", ECHO, "r3")]],
        )
    )
    session = await ask_then_restart_daemon(w)
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    await w.until("the resumed claude read the note", lambda: results_out(w, session.id) == 1)
    assert not w.stored("r1").delivered  # approved, not used yet: a one-shot grant

    await w.restart()
    session = await w.manager.get(session.id)
    await session.send_user_message(None, "go on")
    assert await w.until("the tool ran", lambda: w.tool_results(session.id)) == ["Bash ran"]
    assert w.answers_to(session.id, "r2")[0]["response"]["behavior"] == "allow"
    assert w.stored("r1").delivered
    await session.send_user_message(None, "and again")
    await w.until("r3 forwarded", lambda: w.row("r3"))
    assert w.answers_to(session.id, "r3") == []
    assert [start["run"] for start in w.starts()] == [0, 1, 2]


async def test_a_deny_after_a_restart_is_told_to_claude_and_grants_nothing(
    world: WorldFactory,
) -> None:
    w = await world(runs([[permission("Bash", ECHO, "r1")]], [[permission("Bash", ECHO, "r2")]]))
    session = await ask_then_restart_daemon(w)
    answer = ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message="too risky")
    assert (await w.bridge.answer(session, answer)).outcome == "denied"
    await w.until("r2 forwarded", lambda: w.row("r2"))
    [note] = w.user_texts(session.id)[1:]
    assert "the user denied" in note
    assert note.endswith("The user's message: too risky")
    assert w.stored("r1").delivered
    assert w.answers_to(session.id, "r2") == []
    assert w.bridge.metrics.snapshot()["user_deny"] == 1


async def test_question_answers_after_a_restart_reach_claude_in_the_note(
    world: WorldFactory,
) -> None:
    questions = {"questions": [{"question": "Which color?", "options": [{"label": "Blue"}]}]}
    w = await world(
        runs([[permission("AskUserQuestion", questions, "r1")]], [[text("Blue it is.")]])
    )
    session = await ask_then_restart_daemon(w)
    await w.bridge.answer(session, ClientAnswer("r1", answers={"Which color?": "Blue"}))
    await w.until("claude read the note", lambda: results_out(w, session.id) == 1)
    [note] = w.user_texts(session.id)[1:]
    assert 'the user answered your questions (AskUserQuestion): "Which color?"="Blue"' in note
    assert w.stored("r1").delivered


async def test_an_edited_approval_allows_only_the_edited_call(world: WorldFactory) -> None:
    w = await world(
        runs(
            [[permission("Bash", ECHO, "r1")]],
            [[permission("Bash", ECHO, "r2")], [permission("Bash", EDITED, "r3")]],
        )
    )
    session = await ask_then_restart_daemon(w)
    edit = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT, updated_input=EDITED)
    await w.bridge.answer(session, edit)
    await w.until("the original call is asked again", lambda: w.row("r2"))
    [note] = w.user_texts(session.id)[1:]
    assert "(with the input as the user edited it)" in note
    assert json.dumps(EDITED) in note
    await w.bridge.answer(session, ClientAnswer("r2", Decision.PERMISSION_DECISION_DENY))
    await session.send_user_message(None, "use the edit")
    [allow] = await w.until("the edited call", lambda: w.answers_to(session.id, "r3"))
    assert allow["response"] == {"behavior": "allow", "updatedInput": EDITED}
    assert w.stored("r1").delivered


async def test_a_deny_rule_still_wins_over_an_approval_waiting_for_its_call(
    world: WorldFactory,
) -> None:
    w = await world(runs([[permission("Bash", ECHO, "r1")]], [[permission("Bash", ECHO, "r2")]]))
    session = await ask_then_restart_daemon(w)
    (w.config_dir / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash"]}}))
    w.bridge.reload()
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    [result] = await w.until("the call was denied", lambda: w.tool_results(session.id))
    assert result.startswith("Denied by rule: Bash")
    assert not w.stored("r1").delivered


async def test_a_call_asked_again_after_a_restart_replaces_the_unanswered_old_request(
    world: WorldFactory,
) -> None:
    w = await world(
        runs([[permission("Bash", ECHO, "r1")]], [[permission("Bash", ECHO_AGAIN, "r2")]])
    )
    session = await ask_then_restart_daemon(w)
    await session.send_user_message(None, "try again")
    await w.until("r2 forwarded", lambda: w.row("r2"))
    old = w.stored("r1")
    assert (old.response_decision, old.delivered) == ("cancelled", True)
    # The r2 row is committed before the events that announce it (the next transaction).
    [resolved] = await w.until("r1 resolved", lambda: w.events(session.id, "permission_resolved"))
    assert (resolved.permission_resolved.request_id, resolved.permission_resolved.message) == (
        "r1",
        "asked again as r2",
    )
    assert [row.request_id for row in await w.bridge.list_pending(session.id)] == ["r2"]
    late = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    assert (late.duplicate, late.outcome) == (True, "cancelled")
    await w.bridge.answer(session, ClientAnswer("r2", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    assert await w.until("the tool ran", lambda: w.tool_results(session.id)) == ["Bash ran"]
    assert w.user_texts(session.id) == ["say hi", "try again"]  # no note: nothing was orphaned
