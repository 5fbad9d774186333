"""The Dart SDK dialect (docs/PROTOCOL.md#the-dart-sdk-dialect) is read into the same canonical
types, and answered in kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from betcode.protocol import writer
from betcode.protocol.messages import (
    AssistantMessage,
    CanUseTool,
    ControlRequest,
    ControlResponse,
    Dialect,
    Result,
    SystemInit,
    SystemMessage,
    Usage,
)
from betcode.protocol.reader import ProtocolReader

DART_CALLBACK_REQUEST: dict[str, Any] = {
    "type": "callback.request",
    "request_id": "callback-uuid",
    "request": {
        "subtype": "can_use_tool",
        "tool_name": "Bash",
        "input": {"command": "ls -la"},
        "tool_use_id": "tool-use-uuid",
        "permission_suggestions": [
            {"type": "bash", "action": "allow", "pattern": "ls *", "scope": "session"}
        ],
        "blocked_path": None,
    },
}
STREAM_JSON_REQUEST = {
    "type": "control_request",
    "request_id": "41749186",
    "request": {
        "subtype": "can_use_tool",
        "tool_name": "Bash",
        "input": {"command": "ls -la"},
        "tool_use_id": "toolu_001",
    },
}


def read(message: dict[str, object]) -> object:
    reader = ProtocolReader()
    decoded = reader.decode(json.dumps(message).encode())
    assert reader.stats.parse_errors_tolerated == 0
    assert not reader.stats.unknown_types
    return decoded


def test_callback_request_becomes_a_control_request_in_the_dart_dialect() -> None:
    request = read(DART_CALLBACK_REQUEST)
    assert request == ControlRequest(
        request_id="callback-uuid",
        request=CanUseTool(
            tool_name="Bash",
            input={"command": "ls -la"},
            tool_use_id="tool-use-uuid",
            permission_suggestions=DART_CALLBACK_REQUEST["request"]["permission_suggestions"],
        ),
        dialect=Dialect.DART_SDK,
    )


@pytest.mark.parametrize(
    ("incoming", "reply_type", "input_key"),
    [
        (DART_CALLBACK_REQUEST, "callback.response", "updated_input"),
        (STREAM_JSON_REQUEST, "control_response", "updatedInput"),
    ],
)
def test_allow_goes_back_in_the_dialect_of_its_request(
    incoming: dict[str, object], reply_type: str, input_key: str
) -> None:
    request = read(incoming)
    assert isinstance(request, ControlRequest)
    assert isinstance(request.request, CanUseTool)
    line = writer.permission_allow(
        request.request_id, updated_input=request.request.input, dialect=request.dialect
    )
    assert json.loads(line) == {
        "type": reply_type,
        "response": {
            "subtype": "success",
            "request_id": incoming["request_id"],
            "response": {"behavior": "allow", input_key: {"command": "ls -la"}},
        },
    }


def test_deny_in_the_dart_dialect_matches_the_seed_shape() -> None:
    request = read(DART_CALLBACK_REQUEST)
    assert isinstance(request, ControlRequest)
    line = writer.permission_deny(
        request.request_id,
        "User denied permission",
        dialect=request.dialect,
        tool_use_id="tool-use-uuid",
    )
    assert json.loads(line) == {
        "type": "callback.response",
        "response": {
            "subtype": "success",
            "request_id": "callback-uuid",
            "response": {
                "behavior": "deny",
                "message": "User denied permission",
                "tool_use_id": "tool-use-uuid",
            },
        },
    }


def test_session_created_and_error_are_system_messages() -> None:
    created = read({"type": "session.created", "session_id": "session-uuid"})
    assert isinstance(created, SystemMessage)
    assert (created.subtype, created.session_id) == ("session_created", "session-uuid")
    error = read({"type": "error", "error": {"code": "SESSION_NOT_FOUND", "message": "gone"}})
    assert isinstance(error, SystemMessage)
    assert error.subtype == "error"
    assert error.raw["error"] == {"code": "SESSION_NOT_FOUND", "message": "gone"}


def test_dart_control_response_carries_its_request_id_outside() -> None:
    response = read(
        {"type": "control_response", "request_id": "uuid", "response": {"output_style": "markdown"}}
    )
    assert response == ControlResponse(
        request_id="uuid", subtype="success", response={"output_style": "markdown"}
    )


def test_dart_result_and_assistant_fields_are_mapped() -> None:
    result = read(
        {
            "type": "result",
            "subtype": "success",
            "session_id": "session-uuid",
            "turn_count": 1,
            "duration_seconds": 5.2,
            "usage": {"input_tokens": 100, "output_tokens": 50},
        }
    )
    assert isinstance(result, Result)
    assert (result.num_turns, result.duration_ms, result.is_error) == (1, 5200, False)
    failed = read(
        {
            "type": "result",
            "subtype": "error_max_turns",
            "turn_count": 3,
            "error": "Maximum turns exceeded",
        }
    )
    assert isinstance(failed, Result)
    assert (failed.is_error, failed.errors) == (True, ["Maximum turns exceeded"])
    assistant = read(
        {
            "type": "assistant",
            "uuid": "message-uuid",
            "session_id": "session-uuid",
            "message": {"type": "message", "content": [{"type": "text", "text": "Hello!"}]},
            "model": "sonnet",
            "usage": {"input_tokens": 100, "output_tokens": 50},
        }
    )
    assert isinstance(assistant, AssistantMessage)
    assert (assistant.model, assistant.usage) == (
        "sonnet",
        Usage(input_tokens=100, output_tokens=50),
    )


def test_dart_init_lists_tool_objects() -> None:
    init = read(
        {
            "type": "system",
            "subtype": "init",
            "session_id": "session-uuid",
            "tools": [
                {"name": "Bash", "description": "Execute bash commands"},
                {"name": "Read", "description": "Read file contents"},
            ],
            "mcp_servers": [],
        }
    )
    assert isinstance(init, SystemInit)
    assert init.tools == ["Bash", "Read"]
