"""Every permission decision leaves one audit row: rules (auto_approve_tool_call,
permission_deny), the user's answers (permission_grant / permission_deny, by client id), and
expiry (permission_deny, outcome timeout). Driven on the real path: fake claude → Session →
bridge → SQLite."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from bridge_world import World, WorldFactory, permission

from betcode.config.settings import PermissionSettings
from betcode.permissions.decisions import ClientAnswer
from betcode.storage.audit import input_hash
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
RM = {"command": "rm -rf build", "description": "Clean"}
SECRET = "sk-ant-api03-DoNotStoreMe0123456789"
LEAKY = {"command": f"curl -H 'x-api-key: {SECRET}' https://api.example.com", "description": "x"}
DECISION_TYPES = ("auto_approve_tool_call", "permission_grant", "permission_deny")


def one_turn(*steps: dict[str, object]) -> dict[str, object]:
    return {"turns": [list(steps)]}


def decisions(w: World) -> list[dict[str, Any]]:
    """The permission rows of the audit log, oldest first, as dicts."""
    columns = (
        "event_type, severity, session_id, actor_type, actor_id, tool_name, tool_input_hash, "
        "tool_input_preview, outcome, error_code, error_message, context"
    )
    rows = w.sql(
        f"SELECT {columns} FROM audit_log WHERE event_type IN (?, ?, ?) ORDER BY id",
        *DECISION_TYPES,
    )
    names = [name.strip() for name in columns.split(",")]
    return [dict(zip(names, row, strict=True)) for row in rows]


async def audited(w: World, count: int = 1) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await w.until(
        f"{count} audit rows", lambda: (d := decisions(w)) and len(d) >= count and d
    )
    return rows


async def forwarded(w: World, session_id: str, request_id: str) -> None:
    await w.until(
        f"{request_id} pending", lambda: w.row(request_id) and w.bridge.has_pending(session_id)
    )


async def test_an_allow_rule_is_audited_as_an_auto_approved_call(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")), rules={"allow": ["Bash(echo:*)"]})
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    [row] = await audited(w)
    assert row["event_type"] == "auto_approve_tool_call"
    assert (row["actor_type"], row["actor_id"], row["outcome"]) == (
        "daemon",
        "permission-rules",
        "success",
    )
    assert (row["session_id"], row["tool_name"]) == (session.id, "Bash")
    assert row["tool_input_hash"] == input_hash(ECHO)
    assert row["tool_input_preview"] == "echo hi"
    context = json.loads(row["context"])
    assert context["request_id"] == "r1"
    assert context["reason"].startswith("Bash(echo:*) (from ")


async def test_a_deny_rule_is_audited_as_a_deny_by_the_daemon(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", RM, "r1")), rules={"deny": ["Bash(rm:*)"]})
    session = await w.new_session()
    await session.send_user_message(None, "clean")
    [row] = await audited(w)
    assert (row["event_type"], row["outcome"], row["actor_type"]) == (
        "permission_deny",
        "denied",
        "daemon",
    )
    assert "Bash(rm:*)" in json.loads(row["context"])["reason"]


@pytest.mark.parametrize(
    ("answer", "event_type", "outcome", "decision"),
    [
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE, client_id="c1"),
            "permission_grant",
            "success",
            "allow_once",
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_SESSION, client_id="c1"),
            "permission_grant",
            "success",
            "allow_session",
        ),
        (
            ClientAnswer(
                "r1",
                Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT,
                updated_input={"command": "echo edited"},
                client_id="c1",
            ),
            "permission_grant",
            "success",
            "allow_with_edit",
        ),
        (
            ClientAnswer(
                "r1", Decision.PERMISSION_DECISION_DENY, message="not now", client_id="c1"
            ),
            "permission_deny",
            "denied",
            "deny",
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT, client_id="c1"),
            "permission_deny",
            "denied",
            "deny_interrupt",
        ),
    ],
)
async def test_a_users_answer_is_audited_with_the_client_and_the_decision(
    world: WorldFactory, answer: ClientAnswer, event_type: str, outcome: str, decision: str
) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    assert decisions(w) == []  # forwarding is not a decision
    await w.bridge.answer(session, answer)
    [row] = decisions(w)  # committed with the answer itself: no waiting
    assert (row["event_type"], row["outcome"], row["actor_type"], row["actor_id"]) == (
        event_type,
        outcome,
        "user",
        "c1",
    )
    assert row["tool_input_hash"] == input_hash(ECHO)
    context = json.loads(row["context"])
    assert (context["request_id"], context["decision"]) == ("r1", decision)
    if decision == "allow_session":
        assert context["session_grant"] == "Bash(echo hi)"
    if decision == "allow_with_edit":
        assert context["edited_input_hash"] == input_hash({"command": "echo edited"})
    if decision == "deny":
        assert context["message"] == "not now"


async def test_a_duplicate_answer_is_not_audited_again(world: WorldFactory) -> None:
    w = await world(one_turn(permission("Bash", ECHO, "r1")))
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    again = await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY))
    assert again.duplicate
    assert [row["event_type"] for row in decisions(w)] == ["permission_grant"]


async def test_a_question_answered_is_audited_as_a_grant(world: WorldFactory) -> None:
    questions = {
        "questions": [
            {
                "question": "Which?",
                "header": "H",
                "options": [{"label": "A", "description": ""}],
                "multiSelect": False,
            }
        ]
    }
    w = await world(one_turn(permission("AskUserQuestion", questions, "q1")))
    session = await w.new_session()
    await session.send_user_message(None, "ask me")
    await forwarded(w, session.id, "q1")
    await w.bridge.answer(session, ClientAnswer("q1", answers={"Which?": "A"}, client_id="c2"))
    [row] = decisions(w)
    assert (row["event_type"], row["tool_name"], row["actor_id"]) == (
        "permission_grant",
        "AskUserQuestion",
        "c2",
    )
    assert json.loads(row["context"])["decision"] == "answered"


async def test_an_expired_request_is_audited_as_a_deny_by_timeout(world: WorldFactory) -> None:
    w = await world(
        one_turn(permission("Bash", ECHO, "r1")), settings=PermissionSettings(ttl_seconds=2)
    )
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    w.clock.advance(3)
    assert (await w.bridge.sweep_once()).expired == 1
    [row] = decisions(w)
    assert (row["event_type"], row["outcome"], row["severity"]) == (
        "permission_deny",
        "timeout",
        "warn",
    )
    assert (row["actor_type"], row["actor_id"], row["error_code"]) == (
        "system",
        "permission-sweeper",
        "PERMISSION_TIMEOUT",
    )
    assert (
        row["error_message"]
        == "Permission request expired after 2 seconds. User can retry the operation."
    )
    assert (await w.bridge.sweep_once()).expired == 0
    assert len(decisions(w)) == 1


async def test_no_secret_in_a_tool_input_reaches_the_audit_log(world: WorldFactory) -> None:
    w = await world(
        {"turns": [[permission("Bash", LEAKY, "r1")], [permission("Bash", LEAKY, "r2")]]},
        rules={"ask": ["Bash(curl:*)"]},
    )
    session = await w.new_session()
    await session.send_user_message(None, "call the api")
    await forwarded(w, session.id, "r1")
    await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message=f"not with {SECRET}")
    )
    [row] = decisions(w)
    assert row["tool_input_preview"] == "curl -H 'x-api-key: [REDACTED]' https://api.example.com"
    assert row["tool_input_hash"] == input_hash(LEAKY)
    everything = json.dumps(w.sql("SELECT * FROM audit_log"))
    assert SECRET not in everything


async def test_an_approval_given_after_a_crash_is_audited_again_when_it_lets_the_call_run(
    world: WorldFactory,
) -> None:
    again = {"command": "echo hi", "description": "Retry the approved call"}
    w = await world(
        {
            "runs": [
                {"turns": [[permission("Bash", ECHO, "r1")]]},
                {"turns": [[permission("Bash", again, "r2")]]},
            ]
        }
    )
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await forwarded(w, session.id, "r1")
    asked_by = session.supervisor.pid
    assert asked_by is not None
    os.kill(asked_by, signal.SIGKILL)
    await w.until("claude restarted", lambda: session.supervisor.pid not in (None, asked_by))
    await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    grant, used = await audited(w, 2)
    assert (grant["event_type"], json.loads(grant["context"])["request_id"]) == (
        "permission_grant",
        "r1",
    )
    assert (used["event_type"], used["actor_type"]) == ("auto_approve_tool_call", "daemon")
    context = json.loads(used["context"])
    assert context["request_id"] == "r2"
    assert "approval of r1" in context["reason"]
    assert w.bridge.metrics.snapshot()["auto_allow"] == 0  # counted once, as the user's
