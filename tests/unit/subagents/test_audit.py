"""The audit events of a subagent's life: who acted, and what ties each to the subagent. Pure."""

from __future__ import annotations

import json

import pytest

from betcode.storage.pending import PendingPermission
from betcode.storage.subagents import SubagentRow
from betcode.subagents.audit import subagent_audit, withdrawn_request_audit

ROW = SubagentRow(
    id="sa-1",
    parent_session_id="parent",
    session_id="child",
    name="helper",
    status="running",
    prompt="p",
    model="",
    working_directory="/w",
    allowed_tools=[],
    auto_approve=False,
    max_turns=10,
    result_summary=None,
    exit_code=None,
    created_at=0.0,
    started_at=None,
    completed_at=None,
    orchestration_id=None,
    step_id=None,
    options={},
    error_message=None,
)
REQUEST = PendingPermission(
    request_id="r1",
    session_id="child",
    tool_name="Bash",
    tool_description=None,
    input=json.dumps({"command": "make"}),
    tool_use_id=None,
    dialect="stream_json",
    is_question=False,
    received_at=0.0,
    forwarded_at=None,
    expires_at=1.0,
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


@pytest.mark.parametrize(
    ("actor", "actor_type", "actor_id"),
    [("client-7", "user", "client-7"), (None, "daemon", "subagent-manager")],
)
def test_the_actor_is_the_client_that_asked_or_the_manager(
    actor: str | None, actor_type: str, actor_id: str
) -> None:
    event = subagent_audit("subagent_spawn", ROW, "success", actor=actor)
    assert (event.actor_type, event.actor_id) == (actor_type, actor_id)
    assert (event.subagent_id, event.session_id, event.parent_session_id) == (
        "sa-1",
        "child",
        "parent",
    )


@pytest.mark.parametrize(
    ("error", "error_message"),
    [("", None), ("timed out after 30 minutes", "timed out after 30 minutes")],
)
def test_an_error_is_kept_only_when_there_is_one(error: str, error_message: str | None) -> None:
    assert (
        subagent_audit("subagent_fail", ROW, "failure", error=error).error_message == error_message
    )


def test_a_withdrawn_question_is_a_deny_of_its_call_by_whoever_cancelled() -> None:
    event = withdrawn_request_audit(ROW, REQUEST, "subagent cancelled: enough", "client-7")
    assert (event.event_type, event.outcome) == ("permission_deny", "denied")
    assert (event.actor_type, event.actor_id) == ("user", "client-7")
    assert (event.tool_name, event.tool_input) == ("Bash", {"command": "make"})
    assert (event.subagent_id, event.session_id, event.parent_session_id) == (
        "sa-1",
        "child",
        "parent",
    )
    assert event.context == {
        "request_id": "r1",
        "decision": "cancelled",
        "reason": "subagent cancelled: enough",
    }
