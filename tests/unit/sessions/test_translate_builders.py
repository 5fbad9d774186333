"""The event builders the session and the permission layer call (translate.py re-exports them).

Permission requests and questions are built from real `can_use_tool` lines
(docs/PROTOCOL.md#permission-requests, docs/PROTOCOL.md#questions) decoded by the real
ProtocolReader.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.protocol.reader import ProtocolReader
from betcode.sessions.event_builders import text_delta_event
from betcode.sessions.translate import (
    AgentEvent,
    error_event,
    input_lock_event,
    kind_of,
    permission_reminder_event,
    permission_request_event,
    permission_resolved_event,
    status_event,
    user_input_event,
    user_question_event,
)
from betcode.v1 import common_pb2


def can_use_tool(request: dict[str, Any]) -> tuple[str, CanUseTool]:
    line = {"type": "control_request", "request_id": "41749186-0001", "request": request}
    message = ProtocolReader().decode(json.dumps(line).encode())
    assert isinstance(message, ControlRequest)
    assert isinstance(message.request, CanUseTool)
    return message.request_id, message.request


BASH_REQUEST = {
    "subtype": "can_use_tool",
    "tool_name": "Bash",
    "display_name": "Bash",
    "input": {"command": "python3 -c \"print('hello-from-bash')\"", "description": "Say hello"},
    "description": "Say hello",
    "permission_suggestions": [
        {
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": "python3 -c \"print('hello')\""}],
            "behavior": "allow",
            "destination": "localSettings",
        }
    ],
    "decision_reason": "This command requires approval",
    "decision_reason_type": "other",
    "tool_use_id": "toolu_001",
}


def test_permission_request_carries_what_claude_said() -> None:
    request_id, request = can_use_tool(BASH_REQUEST)
    event = permission_request_event(
        request_id, request, expires_at=1_795_303_569, parent_tool_use_id="toolu_task"
    )
    body = event.permission_request
    assert kind_of(event) == "permission_request"
    assert (body.request_id, body.tool_name, body.description) == (
        "41749186-0001",
        "Bash",
        "Say hello",
    )
    assert MessageToDict(body.input) == BASH_REQUEST["input"]
    assert (body.tool_use_id, body.decision_reason) == (
        "toolu_001",
        "This command requires approval",
    )
    assert body.expires_at.seconds == 1_795_303_569
    assert (body.is_replay, body.blocked_path) == (False, "")
    assert event.parent_tool_use_id == "toolu_task"


def test_permission_request_without_description_uses_the_decision_reason() -> None:
    """A Read outside the working directory (docs/PROTOCOL.md#permission-requests) has no
    description."""
    request_id, request = can_use_tool(
        {
            "subtype": "can_use_tool",
            "tool_name": "Read",
            "input": {"file_path": "/etc/hosts"},
            "decision_reason": "Path is outside allowed working directories",
            "decision_reason_type": "workingDir",
            "tool_use_id": "toolu_r",
        }
    )
    body = permission_request_event(request_id, request, is_replay=True).permission_request
    assert body.description == "Path is outside allowed working directories"
    assert body.is_replay
    assert not body.HasField("expires_at")


def test_permission_request_outside_the_project_names_the_blocked_path() -> None:
    request_id, request = can_use_tool(
        {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "ls /etc/ssl"},
            "blocked_path": "/etc/ssl",
            "tool_use_id": "toolu_ls",
        }
    )
    body = permission_request_event(request_id, request).permission_request
    assert (body.blocked_path, body.description, body.decision_reason) == ("/etc/ssl", "", "")


def ask(questions: list[dict[str, Any]]) -> tuple[str, CanUseTool]:
    return can_use_tool(
        {
            "subtype": "can_use_tool",
            "tool_name": "AskUserQuestion",
            "input": {"questions": questions},
            "tool_use_id": "toolu_ask",
            "requires_user_interaction": True,
        }
    )


def prompt_tuple(prompt: Any) -> tuple[Any, ...]:
    options = [(o.value, o.label, o.description) for o in prompt.options]
    return (prompt.question, prompt.header, options, prompt.multi_select)


def test_user_question_carries_every_question_and_the_first_in_upstream_fields() -> None:
    """The CLI's AskUserQuestion schema (docs/PROTOCOL.md#questions), three questions."""
    request_id, request = ask(
        [
            {
                "question": "Which color do you prefer?",
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
                "options": [
                    {"label": "S", "description": "Small"},
                    {"label": "M", "description": "Medium"},
                    {"label": "L", "description": "Large"},
                ],
                "multiSelect": True,
            },
            {
                "question": "Ship today?",
                "header": "Ship",
                "options": [{"label": "Yes", "description": ""}, {"label": "No"}],
                "multiSelect": False,
            },
        ]
    )
    event = user_question_event(request_id, request, parent_tool_use_id="toolu_task")
    body = event.user_question
    assert kind_of(event) == "user_question"
    assert event.parent_tool_use_id == "toolu_task"
    assert body.question_id == request_id
    assert [prompt_tuple(p) for p in body.questions] == [
        (
            "Which color do you prefer?",
            "Color",
            [("Blue", "Blue", "Calm"), ("Red", "Red", "Bold")],
            False,
        ),
        (
            "Which sizes?",
            "Sizes",
            [("S", "S", "Small"), ("M", "M", "Medium"), ("L", "L", "Large")],
            True,
        ),
        ("Ship today?", "Ship", [("Yes", "Yes", ""), ("No", "No", "")], False),
    ]
    assert (body.question, body.multi_select) == ("Which color do you prefer?", False)
    assert [(o.value, o.label) for o in body.options] == [("Blue", "Blue"), ("Red", "Red")]
    assert not body.is_replay


def test_user_question_in_the_seed_shape_with_string_options() -> None:
    """An older SDK's example: options as strings, `multi_select` in snake case."""
    request_id, request = ask(
        [
            {
                "question": "Which database?",
                "options": ["PostgreSQL", "SQLite"],
                "multi_select": True,
            },
            {"question": "Which port?", "options": ["5432", 5433, None]},
        ]
    )
    body = user_question_event(request_id, request, is_replay=True).user_question
    assert [prompt_tuple(p) for p in body.questions] == [
        ("Which database?", "", [("PostgreSQL", "PostgreSQL", ""), ("SQLite", "SQLite", "")], True),
        ("Which port?", "", [("5432", "5432", "")], False),  # non-text options are dropped
    ]
    assert (body.question, body.multi_select, body.is_replay) == ("Which database?", True, True)


@pytest.mark.parametrize(
    "tool_input",
    [{}, {"questions": "not a list"}, {"questions": ["not an object"]}],
)
def test_user_question_with_no_usable_questions_is_still_an_event(
    tool_input: dict[str, Any],
) -> None:
    request_id, request = can_use_tool(
        {"subtype": "can_use_tool", "tool_name": "AskUserQuestion", "input": tool_input}
    )
    body = user_question_event(request_id, request).user_question
    assert (body.question_id, body.question, len(body.questions)) == (request_id, "", 0)


@pytest.mark.parametrize(
    ("event", "kind", "fields"),
    [
        (
            permission_resolved_event("r1", "allowed", message="ok", decided_by_client_id="c1"),
            "permission_resolved",
            {"requestId": "r1", "outcome": "allowed", "message": "ok", "decidedByClientId": "c1"},
        ),
        (
            permission_reminder_event("r1", "Bash", 3600, expires_at=1_795_303_569),
            "permission_reminder",
            {
                "requestId": "r1",
                "toolName": "Bash",
                "waitingSeconds": "3600",
                "expiresAt": "2026-11-21T23:26:09Z",
            },
        ),
        (
            input_lock_event("client-2", you_hold=True),
            "input_lock",
            {"holderClientId": "client-2", "youHold": True},
        ),
        (user_input_event("Now run the tests."), "user_input", {"content": "Now run the tests."}),
        (
            status_event(common_pb2.AGENT_STATUS_WAITING_FOR_USER, "Bash needs approval"),
            "status_change",
            {"status": "AGENT_STATUS_WAITING_FOR_USER", "message": "Bash needs approval"},
        ),
        (
            error_event("SUBPROCESS_CRASHED", "claude exited 1", details={"exit_code": "1"}),
            "error",
            {
                "code": "SUBPROCESS_CRASHED",
                "message": "claude exited 1",
                "details": {"exit_code": "1"},
            },
        ),
        (
            error_event("SQLITE_ERROR", "disk full", is_fatal=True),
            "error",
            {"code": "SQLITE_ERROR", "message": "disk full", "isFatal": True},
        ),
    ],
)
def test_daemon_event_builders(event: AgentEvent, kind: str, fields: dict[str, Any]) -> None:
    assert kind_of(event) == kind
    assert MessageToDict(getattr(event, kind)) == fields
    assert event.sequence == 0
    assert not event.HasField("timestamp")


@pytest.mark.parametrize(
    ("event", "parent", "delta"),
    [
        (text_delta_event("Hel"), "", {"text": "Hel"}),
        (text_delta_event(""), "", {}),  # an empty delta is still a text_delta
        (text_delta_event("", is_complete=True), "", {"isComplete": True}),
        (
            text_delta_event("done", is_complete=True, parent_tool_use_id="toolu_1"),
            "toolu_1",
            {"text": "done", "isComplete": True},
        ),
    ],
)
def test_text_delta_event(event: AgentEvent, parent: str, delta: dict[str, Any]) -> None:
    assert kind_of(event) == "text_delta"
    assert event.parent_tool_use_id == parent
    assert MessageToDict(event.text_delta) == delta


def test_kind_of_an_event_with_nothing_set_is_an_error() -> None:
    with pytest.raises(ValueError, match="no event member"):
        kind_of(AgentEvent())
