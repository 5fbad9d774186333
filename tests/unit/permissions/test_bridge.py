"""The bridge on the real path: fake claude → Session → PermissionBridge → SQLite → claude.

Each test drives a real session whose claude is the scripted fake: its `permission` step sends
a `can_use_tool` and waits for our control_response, then echoes a tool_result ("Bash ran",
or the deny message), so what claude received is visible both in the stored stdin lines and in
what it did with them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest
from bridge_world import WAIT_SECONDS, World, WorldFactory, permission
from google.protobuf.json_format import MessageToDict

from betcode.permissions.decisions import AnswerError, ClientAnswer
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.session import Session
from betcode.storage.audit import AuditEvent
from betcode.storage.grants import add_grant
from betcode.storage.pending import PendingPermission
from betcode.v1 import agent_pb2, common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
RM = {"command": "rm -rf build", "description": "Clean"}
PUSH = {"command": "git push origin main", "description": "Publish"}
QUESTIONS = {
    "questions": [
        {
            "question": "Which color?",
            "header": "Color",
            "options": [
                {"label": "Blue", "description": "Calm"},
                {"label": "Red", "description": "Bold"},
            ],
            "multiSelect": False,
        },
        {
            "question": "Which sizes?",
            "header": "Sizes",
            "options": [{"label": "S", "description": "Small"}, {"label": "L", "description": ""}],
            "multiSelect": True,
        },
    ]
}


def one_turn(*steps: dict[str, object]) -> dict[str, object]:
    return {"turns": [list(steps)]}


async def forwarded(w: World, session_id: str, request_id: str) -> None:
    """Wait until the request is stored and shown to the session's clients."""

    def shown() -> bool:
        requests = w.events(session_id, "permission_request")
        return any(e.permission_request.request_id == request_id for e in requests)

    await w.until(f"{request_id} stored", lambda: w.row(request_id))
    await w.until(f"{request_id} shown", shown)


# ---- rules before forwarding ----


async def test_a_deny_rule_answers_at_once_with_a_message_naming_the_rule(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", RM, "r1")), rules={"deny": ["Bash(rm:*)"]})
    session = await w.new_session()
    await session.send_user_message(None, "clean up")
    [result] = await w.until("the tool result", lambda: w.tool_results(session.id))
    assert result.startswith("Denied by rule: Bash(rm:*) (from ")
    assert str(w.config_dir / "settings.json") in result
    [answer] = w.answers_to(session.id, "r1")
    assert answer["response"]["behavior"] == "deny"
    assert w.row("r1") is None  # decided at once: never pending, never shown
    assert w.events(session.id, "permission_request") == []
    assert w.bridge.metrics.snapshot()["auto_deny"] == 1


async def test_an_allow_rule_answers_at_once_and_the_tool_runs(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")), rules={"allow": ["Bash(echo:*)"]})
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    assert await w.until("the tool result", lambda: w.tool_results(session.id)) == ["Bash ran"]
    [answer] = w.answers_to(session.id, "r1")
    assert answer["response"] == {"behavior": "allow"}
    assert w.row("r1") is None
    assert w.events(session.id, "permission_request") == []
    assert w.bridge.metrics.snapshot() == {
        "auto_allow": 1,
        "auto_deny": 0,
        "user_allow": 0,
        "user_deny": 0,
        "timeout": 0,
    }


async def test_project_rules_of_the_working_directory_apply(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", RM, "r1")))
    (w.workdir / ".claude" / "settings.local.json").write_text(
        json.dumps({"permissions": {"deny": ["Bash(rm -rf:*)"]}})
    )
    session = await w.new_session()
    await session.send_user_message(None, "clean up")
    [result] = await w.until("the tool result", lambda: w.tool_results(session.id))
    assert "settings.local.json" in result
    assert result.startswith("Denied by rule: Bash(rm -rf:*)")


async def test_an_ask_rule_forwards_even_when_an_allow_rule_matches(world: WorldFactory) -> None:
    w = await world(
        one_turn(permission("Bash", PUSH, "r1")),
        rules={"allow": ["Bash"], "ask": ["Bash(git push:*)"]},
    )
    session = await w.new_session()
    await session.send_user_message(None, "publish")
    await forwarded(w, session.id, "r1")
    assert w.answers_to(session.id, "r1") == []
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    assert await w.until("the tool result", lambda: w.tool_results(session.id)) == ["Bash ran"]


async def test_invalid_rules_are_reported_and_skipped_and_the_others_still_apply(
    world: WorldFactory, caplog: pytest.LogCaptureFixture
) -> None:
    w = await world(
        one_turn(permission("Bash", ECHO, "r1")), rules={"allow": ["Bash([", "Bash(echo:*)"]}
    )
    session = await w.new_session()
    with caplog.at_level(logging.WARNING):
        await session.send_user_message(None, "say hi")
        assert await w.until("the tool result", lambda: w.tool_results(session.id)) == ["Bash ran"]
    [report] = [r.getMessage() for r in caplog.records if "Bash([" in r.getMessage()]
    assert str(w.config_dir / "settings.json") in report
    assert "skipped" in report


async def test_reload_reads_the_rules_again(world: WorldFactory) -> None:
    w = await world(
        {"turns": [[permission("Bash", ECHO, "r1")], [permission("Bash", ECHO, "r2")]]},
        rules={"allow": ["Bash(echo:*)"]},
    )
    session = await w.new_session()
    await session.send_user_message(None, "one")
    await w.until("the first result", lambda: w.tool_results(session.id))
    (w.config_dir / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash"]}}))
    w.bridge.reload()
    await session.send_user_message(None, "two")
    results = await w.until("the second result", lambda: w.tool_results(session.id)[1:])
    assert results[0].startswith("Denied by rule: Bash (from ")


async def test_a_request_no_rule_decides_is_stored_then_shown_to_clients(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    before = w.clock()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    row = w.stored("r1")
    assert (row.tool_name, json.loads(row.input), row.response_received) == ("Bash", ECHO, False)
    assert row.expires_at >= before + 7 * 86_400
    [event] = w.events(session.id, "permission_request")
    request = event.permission_request
    assert (request.request_id, request.tool_name, request.is_replay) == ("r1", "Bash", False)
    assert request.expires_at.seconds == int(row.expires_at)
    statuses = [e.status_change.status for e in w.events(session.id, "status_change")]
    assert common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER in statuses
    assert w.bridge.has_pending(session.id)
    await w.until("forwarded_at", lambda: w.stored("r1").forwarded_at)


# ---- answers ----


@pytest.mark.parametrize(
    ("answer", "expected", "outcome"),
    [
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE),
            {"behavior": "allow"},
            "allowed",
        ),
        (
            ClientAnswer(
                "r1",
                Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT,
                updated_input={"command": "echo edited"},
            ),
            {"behavior": "allow", "updatedInput": {"command": "echo edited"}},
            "allowed",
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message="not now"),
            {"behavior": "deny", "message": "not now"},
            "denied",
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY_NO_INTERRUPT),
            {"behavior": "deny", "message": "The user denied this tool use."},
            "denied",
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT, message="stop"),
            {"behavior": "deny", "message": "stop", "interrupt": True},
            "denied",
        ),
    ],
)
async def test_each_client_decision_becomes_its_control_response(
    world: WorldFactory, answer: ClientAnswer, expected: dict[str, object], outcome: str
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    result = await w.bridge.answer(session, answer)
    assert (result.accepted, result.duplicate, result.outcome) == (True, False, outcome)
    [written] = await w.until("the answer", lambda: w.answers_to(session.id, "r1"))
    assert written == {"subtype": "success", "request_id": "r1", "response": expected}
    [resolved] = await w.until("resolved", lambda: w.events(session.id, "permission_resolved"))
    assert (resolved.permission_resolved.request_id, resolved.permission_resolved.outcome) == (
        "r1",
        outcome,
    )
    # The input that runs, for every client and replay: only an edit carries one.
    has_edit = resolved.permission_resolved.HasField("updated_input")
    edited = MessageToDict(resolved.permission_resolved.updated_input) if has_edit else None
    assert edited == expected.get("updatedInput")
    row = w.stored("r1")
    assert row.response_received
    assert row.delivered
    assert not w.bridge.has_pending(session.id)
    kind = "user_allow" if outcome == "allowed" else "user_deny"
    assert w.bridge.metrics.snapshot()[kind] == 1


async def test_the_first_answer_wins_and_a_duplicate_changes_nothing(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    first = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    again = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message="changed my mind")
    )
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.outcome == "allowed"
    await w.until("the tool result", lambda: w.tool_results(session.id))
    assert len(w.answers_to(session.id, "r1")) == 1
    assert w.stored("r1").response_decision == "allow_once"
    assert w.bridge.metrics.snapshot()["user_allow"] == 1
    assert len(w.events(session.id, "permission_resolved")) == 1


async def test_an_unknown_request_id_or_another_sessions_request_is_not_found(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session, other = await w.new_session(), await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    for target, request_id in ((session, "nope"), (other, "r1")):
        with pytest.raises(AnswerError) as raised:
            await w.bridge.answer(
                target, ClientAnswer(request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
            )
        assert raised.value.code == "PERMISSION_NOT_FOUND"
    assert w.stored("r1").response_received is False


async def test_allow_session_stores_a_scoped_grant_so_the_same_call_is_not_asked_again(
    world: WorldFactory,
) -> None:
    other = {"command": "echo bye", "description": "Say bye"}
    w = await world(
        {
            "turns": [
                [permission("Bash", ECHO, "r1")],
                [permission("Bash", ECHO, "r2")],
                [permission("Bash", other, "r3")],
            ]
        }
    )
    session = await w.new_session()
    await session.send_user_message(None, "one")
    await forwarded(w, session.id, "r1")
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_SESSION))
    await w.until("the first result", lambda: w.tool_results(session.id))
    grants = w.sql("SELECT tool_name, pattern, action FROM permission_grants")
    assert grants == [("Bash", "echo hi", "allow")]
    await session.send_user_message(None, "two")
    await w.until("the second result", lambda: len(w.tool_results(session.id)) == 2)
    assert w.row("r2") is None  # allowed by the grant, never forwarded
    assert w.answers_to(session.id, "r2")[0]["response"] == {"behavior": "allow"}
    await session.send_user_message(None, "three")
    await forwarded(w, session.id, "r3")  # the grant is scoped to that command
    assert w.bridge.metrics.snapshot()["auto_allow"] == 1


async def test_a_tool_wide_session_grant_allows_and_a_deny_grant_denies(
    world: WorldFactory,
) -> None:
    w = await world(
        {
            "turns": [
                [permission("Bash", ECHO, "r1")],
                [permission("Read", {"file_path": "/x"}, "r2")],
            ]
        }
    )
    session = await w.new_session()
    await w.writer.call(lambda c: add_grant(c, session.id, "Bash", "allow", time.time()))
    await w.writer.call(lambda c: add_grant(c, session.id, "Read", "deny", time.time()))
    await session.send_user_message(None, "one")
    await w.until("the first result", lambda: w.tool_results(session.id) == ["Bash ran"])
    await session.send_user_message(None, "two")
    results = await w.until("the second result", lambda: w.tool_results(session.id)[1:])
    assert results[0].startswith("Denied by rule: Read (from session grant)")


async def test_ask_user_question_is_always_forwarded_and_answered_with_the_answers(
    world: WorldFactory,
) -> None:
    w = await world(
        one_turn(permission("AskUserQuestion", QUESTIONS, "q1")),
        rules={"allow": ["AskUserQuestion"]},
    )
    session = await w.new_session()
    await session.send_user_message(None, "ask me")
    await w.until("the question", lambda: w.events(session.id, "user_question"))
    [event] = w.events(session.id, "user_question")
    question = event.user_question
    assert question.question_id == "q1"
    assert [q.question for q in question.questions] == ["Which color?", "Which sizes?"]
    assert [o.label for o in question.questions[0].options] == ["Blue", "Red"]
    assert question.questions[0].options[0].description == "Calm"
    assert question.questions[1].multi_select
    assert w.stored("q1").is_question
    answers = {"Which color?": "Blue", "Which sizes?": "S, L"}
    outcome = await w.bridge.answer(session, ClientAnswer("q1", answers=answers))
    assert outcome.outcome == "answered"
    [written] = await w.until("the answer", lambda: w.answers_to(session.id, "q1"))
    assert written["response"] == {
        "behavior": "allow",
        "updatedInput": {**QUESTIONS, "answers": answers},
    }
    assert w.bridge.metrics.snapshot()["user_allow"] == 1


async def test_cancel_from_claude_withdraws_the_request_and_tells_the_clients(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    assert await session.cancel_turn()  # the fake answers the interrupt with a cancel
    [resolved] = await w.until("resolved", lambda: w.events(session.id, "permission_resolved"))
    assert resolved.permission_resolved.outcome == "cancelled"
    assert w.stored("r1").response_decision == "cancelled"
    late = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    assert (late.duplicate, late.outcome) == (True, "cancelled")
    assert w.answers_to(session.id, "r1") == []
    assert not w.bridge.has_pending(session.id)


def denied_by_tester(row: PendingPermission) -> AuditEvent:
    """The audit row of a request withdrawn in these tests."""
    context = {"request_id": row.request_id}
    return AuditEvent("permission_deny", "daemon", "tester", "denied", context=context)


async def test_withdraw_all_settles_the_unanswered_requests_and_never_answers_claude(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")

    frames = await w.bridge.withdraw_all(session, "stopped for good", denied_by_tester)

    [(_, payload)] = frames  # what the session's clients were shown, as stored
    resolved = agent_pb2.AgentEvent.FromString(payload).permission_resolved
    assert (resolved.request_id, resolved.outcome) == ("r1", "cancelled")
    assert resolved.message == "stopped for good"
    [stored] = await w.until("stored", lambda: w.events(session.id, "permission_resolved"))
    assert stored.permission_resolved == resolved
    assert (w.stored("r1").response_decision, w.stored("r1").delivered) == ("cancelled", True)
    query = "SELECT actor_id, context FROM audit_log WHERE event_type = 'permission_deny'"
    [(actor, context)] = w.sql(query)
    assert (actor, json.loads(context)) == ("tester", {"request_id": "r1"})
    assert not w.bridge.has_pending(session.id)
    assert w.answers_to(session.id, "r1") == []  # claude still waits: nothing was written
    assert await w.bridge.withdraw_all(session, "once more", denied_by_tester) == []


class EndingSubagents:
    """The bridge's delegates for sessions that stand for subagents: `ending` holds why the
    questions of a session whose run ended (or is ending) are withdrawn."""

    def __init__(self) -> None:
        self.ending: dict[str, str] = {}
        self.asked: list[str] = []  # the sessions `withdrawn` was asked about, in order

    def asker_label(self, session_id: str) -> str | None:
        return None

    async def decide(self, session: Session, request: ControlRequest, tool: CanUseTool) -> None:
        return None

    async def child_session(self, parent: Session, session_id: str) -> Session | None:
        return None

    async def child_session_ids(self, parent_session_id: str) -> list[str]:
        return []

    async def resumed_later(self, session_id: str) -> bool:
        return False

    async def withdrawn(self, session_id: str) -> str | None:
        self.asked.append(session_id)
        return self.ending.get(session_id)


async def test_an_answer_to_a_withdrawn_question_is_refused_and_never_reaches_claude(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    subagents = EndingSubagents()
    w.bridge.delegates = subagents
    subagents.ending[session.id] = "subagent failed: claude was killed"
    allow = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)

    with pytest.raises(AnswerError) as refused:
        await w.bridge.answer(session, allow)

    assert refused.value.code == "PERMISSION_WITHDRAWN"
    assert str(refused.value) == (
        "permission request 'r1' was withdrawn: subagent failed: claude was killed"
    )
    assert not w.stored("r1").response_received  # the withdrawal settles it, not the answer
    assert w.answers_to(session.id, "r1") == []
    await w.bridge.withdraw_all(session, "subagent failed", denied_by_tester)
    with pytest.raises(AnswerError) as again:  # settled by the withdrawal: still refused
        await w.bridge.answer(session, allow)
    assert again.value.code == "PERMISSION_WITHDRAWN"
    assert w.answers_to(session.id, "r1") == []


async def test_drain_answers_waits_for_an_answer_being_applied_which_wins_and_reaches_claude(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    subagents = EndingSubagents()
    w.bridge.delegates = subagents
    writer_free = threading.Event()
    busy = w.writer.submit(lambda c: writer_free.wait(WAIT_SECONDS))  # the answer queues behind
    allow = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    answering = asyncio.create_task(w.bridge.answer(session, allow))
    await w.until("the answer past the check", lambda: subagents.asked)

    subagents.ending[session.id] = "subagent cancelled"  # the run starts ending now
    draining = asyncio.create_task(w.bridge.drain_answers(session.id))
    await asyncio.sleep(0.2)
    assert not draining.done()  # the answer already applied goes first
    writer_free.set()
    await busy

    outcome = await answering
    await draining
    assert (outcome.duplicate, outcome.outcome) == (False, "allowed")
    # Written to claude while it still waited (before the drain returned): the call ran.
    [answer] = await w.until("the answer stored", lambda: w.answers_to(session.id, "r1"))
    assert answer["response"]["behavior"] == "allow"
    assert await w.until("the tool result", lambda: w.tool_results(session.id)) == ["Bash ran"]
    assert await w.bridge.withdraw_all(session, "too late", denied_by_tester) == []
    repeat = await w.bridge.answer(session, allow)  # a repeat of a recorded answer
    assert (repeat.duplicate, repeat.outcome) == (True, "allowed")


async def test_a_client_catching_up_gets_every_pending_request_flagged_as_replay(
    world: WorldFactory,
) -> None:
    w = await world(one_turn(permission("AskUserQuestion", QUESTIONS, "q1")))
    session = await w.new_session()
    await session.send_user_message(None, "ask me")
    await w.until("the question", lambda: w.row("q1"))
    frames = await w.bridge.replay_frames(session, 41)
    assert [seq for seq, _ in frames] == [41]
    event = agent_pb2.AgentEvent.FromString(frames[0][1])
    assert (event.user_question.question_id, event.user_question.is_replay) == ("q1", True)
    await w.bridge.answer(session, ClientAnswer("q1", answers={"Which color?": "Red"}))
    assert await w.bridge.replay_frames(session, 41) == []
