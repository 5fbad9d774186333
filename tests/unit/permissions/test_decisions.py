"""The pure parts: an answer → the exact control_response, expiry text, one-shot matching."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from betcode.permissions.decisions import (
    AnswerError,
    ClientAnswer,
    build_reply,
    expiry_reply,
    format_ttl,
    outcome_of,
)
from betcode.permissions.grants import SessionGrant
from betcode.permissions.orphans import (
    approved_input,
    claim_delivery,
    one_shot_for,
    resume_note,
    same_call,
)
from betcode.storage import open_database
from betcode.storage import pending as pending_rows
from betcode.storage.pending import PendingPermission
from betcode.storage.sessions import create_session
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
BASH = {"command": "npm test", "description": "Run the tests"}
NOW = 1_700_000_000.0


def stored(
    tool: str = "Bash",
    tool_input: dict[str, Any] | None = None,
    *,
    dialect: str = "stream_json",
    is_question: bool = False,
) -> PendingPermission:
    return PendingPermission(
        request_id="r1",
        session_id="s1",
        tool_name=tool,
        tool_description=None,
        input=json.dumps(BASH if tool_input is None else tool_input),
        tool_use_id="toolu_1",
        dialect=dialect,
        is_question=is_question,
        received_at=NOW,
        forwarded_at=NOW,
        expires_at=NOW + 3600,
        last_extended_at=None,
        extension_count=0,
        reminder_1h_sent=False,
        reminder_24h_sent=False,
        push_notification_id=None,
        response_received=False,
        response_decision=None,
        response_payload=None,
        response_at=None,
        delivered=False,
    )


def answered(row: PendingPermission, answer: ClientAnswer) -> PendingPermission:
    reply = build_reply(row, answer)
    return dataclasses.replace(
        row,
        response_received=True,
        response_decision=reply.decision,
        response_payload=reply.line.decode(),
        response_at=NOW,
    )


def body(line: bytes) -> dict[str, Any]:
    assert line.endswith(b"\n")
    return dict(json.loads(line))


@pytest.mark.parametrize(
    ("answer", "decision", "response"),
    [
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE),
            "allow_once",
            {"behavior": "allow"},
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_SESSION),
            "allow_session",
            {"behavior": "allow"},
        ),
        (
            ClientAnswer(
                "r1", Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT, updated_input={"command": "ls"}
            ),
            "allow_with_edit",
            {"behavior": "allow", "updatedInput": {"command": "ls"}},
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message=" no "),
            "deny",
            {"behavior": "deny", "message": "no"},
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY),
            "deny",
            {"behavior": "deny", "message": "The user denied this tool use."},
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY_NO_INTERRUPT, message="later"),
            "deny",
            {"behavior": "deny", "message": "later"},
        ),
        (
            ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT, message="stop"),
            "deny_interrupt",
            {"behavior": "deny", "message": "stop", "interrupt": True},
        ),
    ],
)
def test_each_decision_becomes_one_control_response(
    answer: ClientAnswer, decision: str, response: dict[str, Any]
) -> None:
    reply = build_reply(stored(), answer)
    assert reply.decision == decision
    assert body(reply.line) == {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": "r1", "response": response},
    }


def test_allow_session_is_scoped_by_claudes_suggestion_or_else_to_the_exact_command() -> None:
    allow = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_SESSION)
    assert build_reply(stored(), allow).grant == SessionGrant("Bash", "npm test")
    suggestion = {
        "type": "addRules",
        "rules": [{"toolName": "Bash", "ruleContent": "npm:*"}],
        "behavior": "allow",
        "destination": "localSettings",
    }
    assert build_reply(stored(), allow, [suggestion]).grant == SessionGrant("Bash", "npm:*")


def test_question_answers_go_back_in_the_updated_input() -> None:
    questions = {"questions": [{"question": "Color?", "options": []}]}
    row = stored("AskUserQuestion", questions, is_question=True)
    reply = build_reply(row, ClientAnswer("r1", answers={"Color?": "Blue"}))
    assert (reply.decision, reply.outcome) == ("answered", "answered")
    assert body(reply.line)["response"]["response"] == {
        "behavior": "allow",
        "updatedInput": {**questions, "answers": {"Color?": "Blue"}},
    }
    denied = build_reply(row, ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message="no"))
    assert denied.outcome == "denied"


@pytest.mark.parametrize(
    ("row", "answer", "why"),
    [
        (
            stored(),
            ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT),
            "updated_input",
        ),
        (stored(), ClientAnswer("r1"), "unknown permission decision"),
        (stored(), ClientAnswer("r1", 99), "unknown permission decision 99"),
        (
            stored("AskUserQuestion", {"questions": []}, is_question=True),
            ClientAnswer("r1"),
            "answers",
        ),
    ],
)
def test_answers_that_cannot_apply_are_invalid_arguments(
    row: PendingPermission, answer: ClientAnswer, why: str
) -> None:
    with pytest.raises(AnswerError, match=why) as raised:
        build_reply(row, answer)
    assert raised.value.code == "INVALID_ARGUMENT"


def test_replies_use_the_dialect_the_request_came_in() -> None:
    row = stored(dialect="dart_sdk")
    edit = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT, updated_input={"a": 1})
    message = body(build_reply(row, edit).line)
    assert message["type"] == "callback.response"
    assert message["response"]["response"] == {"behavior": "allow", "updated_input": {"a": 1}}
    assert approved_input(answered(row, edit)) == {"a": 1}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (7 * 86_400, "7 days"),
        (86_400, "1 day"),
        (3600, "1 hour"),
        (5400, "90 minutes"),
        (36 * 3600, "36 hours"),
        (60, "1 minute"),
        (2, "2 seconds"),
        (1, "1 second"),
        (0.5, "0.5 seconds"),
        (90, "90 seconds"),
    ],
)
def test_ttls_are_written_in_the_largest_exact_unit(seconds: float, text: str) -> None:
    assert format_ttl(seconds) == text


def test_the_expiry_reply_is_the_seeds_soft_deny() -> None:
    reply = expiry_reply(stored(), 7 * 86_400)
    expected = "Permission request expired after 7 days. User can retry the operation."
    assert (reply.decision, reply.outcome, reply.message) == ("expired", "expired", expected)
    assert body(reply.line)["response"]["response"] == {"behavior": "deny", "message": expected}


@pytest.mark.parametrize(
    ("decision", "outcome"),
    [
        ("allow_once", "allowed"),
        ("allow_session", "allowed"),
        ("allow_with_edit", "allowed"),
        ("deny", "denied"),
        ("deny_interrupt", "denied"),
        ("expired", "expired"),
        ("cancelled", "cancelled"),
        ("answered", "answered"),
        (None, ""),
    ],
)
def test_stored_decisions_map_to_client_outcomes(decision: str | None, outcome: str) -> None:
    assert outcome_of(decision) == outcome


# ---- one-shot grants ----


def test_a_one_shot_grant_covers_the_approved_call_only_and_only_for_its_lifetime() -> None:
    grant = answered(stored(), ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    relabelled = {**BASH, "description": "Retry"}
    assert one_shot_for([grant], "Bash", relabelled, now=NOW + 10, lifetime=60) == grant
    assert one_shot_for([grant], "Bash", {"command": "npm test -x"}, now=NOW, lifetime=60) is None
    assert one_shot_for([grant], "Read", BASH, now=NOW, lifetime=60) is None
    assert one_shot_for([grant], "Bash", BASH, now=NOW + 60, lifetime=60) is None
    denied = answered(stored(), ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY))
    assert one_shot_for([denied], "Bash", BASH, now=NOW, lifetime=60) is None


def test_an_edited_approval_covers_the_edited_input() -> None:
    edit = ClientAnswer(
        "r1", Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT, updated_input={"command": "npm ci"}
    )
    grant = answered(stored(), edit)
    assert approved_input(grant) == {"command": "npm ci"}
    assert one_shot_for([grant], "Bash", {"command": "npm ci"}, now=NOW, lifetime=60) == grant
    assert one_shot_for([grant], "Bash", BASH, now=NOW, lifetime=60) is None


def test_same_call_ignores_only_cosmetic_labels() -> None:
    assert same_call({"command": "ls", "description": "a"}, {"command": "ls"})
    assert not same_call({"command": "ls"}, {"command": "ls", "timeout": 5})


def test_the_note_says_what_the_user_decided() -> None:
    row = stored()
    allow = ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    note = resume_note(answered(row, allow), build_reply(row, allow), {})
    assert note == (
        "[BetCode] While you were restarting, the user approved the tool call that was waiting "
        f"for permission: Bash with input {json.dumps(BASH)}. It has not run. If it is still "
        "needed, make exactly this call again now; it will be allowed once."
    )
    deny = ClientAnswer("r1", Decision.PERMISSION_DECISION_DENY, message="not on main")
    note = resume_note(answered(row, deny), build_reply(row, deny), {})
    assert "the user denied the tool call" in note
    assert note.endswith("Do not run it. The user's message: not on main")
    huge = stored("Write", {"file_path": "/a", "content": "x" * 10_000})
    note = resume_note(answered(huge, allow), build_reply(huge, allow), {})
    assert len(note) < 2500
    assert "the call is the one you made before" in note


def test_a_one_shot_grant_is_claimed_exactly_once(tmp_path: Path) -> None:
    database = open_database(tmp_path / "daemon.db")
    conn = database.connect()
    try:
        create_session(conn, session_id="s1", model="m", working_directory="/w", now=NOW)
        row = stored()
        pending_rows.insert_pending(
            conn,
            request_id="r1",
            session_id="s1",
            tool_name="Bash",
            input_json=row.input,
            dialect=row.dialect,
            received_at=NOW,
            expires_at=NOW + 60,
        )
        assert not claim_delivery(conn, "r1")  # not answered yet
        pending_rows.answer(conn, "r1", decision="allow_once", payload="{}", now=NOW)
        assert claim_delivery(conn, "r1")
        assert not claim_delivery(conn, "r1")
        assert not claim_delivery(conn, "unknown")
    finally:
        conn.close()
