"""Stdin writer: exact lines the CLI accepts (docs/PROTOCOL.md#messages-written), and refusals of
what kills it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.protocol import writer
from betcode.protocol.messages import Dialect
from betcode.protocol.writer import ProtocolWriteError

UUID = "aaaaaaaa-0000-4000-8000-000000000001"
QUESTIONS = [
    {
        "question": "Which color do you prefer?",
        "header": "Color",
        "options": [{"label": "Blue", "description": "b"}, {"label": "Red", "description": "r"}],
        "multiSelect": False,
    }
]

EXACT = [
    (
        writer.user_message("Now run the tests please.", uuid=UUID),
        {
            "type": "user",
            "message": {"role": "user", "content": "Now run the tests please."},
            "session_id": "",
            "parent_tool_use_id": None,
            "uuid": UUID,
        },
    ),
    (
        writer.permission_allow("req_001", updated_input={"command": "cargo build --release"}),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "req_001",
                "response": {
                    "behavior": "allow",
                    "updatedInput": {"command": "cargo build --release"},
                },
            },
        },
    ),
    (
        writer.permission_allow(
            "r",
            updated_permissions=[
                {
                    "type": "addRules",
                    "rules": [{"toolName": "Bash"}],
                    "behavior": "allow",
                    "destination": "session",
                }
            ],
        ),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "r",
                "response": {
                    "behavior": "allow",
                    "updatedPermissions": [
                        {
                            "type": "addRules",
                            "rules": [{"toolName": "Bash"}],
                            "behavior": "allow",
                            "destination": "session",
                        }
                    ],
                },
            },
        },
    ),
    (
        writer.permission_deny("req_001", "Daemon says no"),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "req_001",
                "response": {"behavior": "deny", "message": "Daemon says no"},
            },
        },
    ),
    (
        writer.permission_deny("req_001", "stop", interrupt=True),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "req_001",
                "response": {"behavior": "deny", "message": "stop", "interrupt": True},
            },
        },
    ),
    (
        writer.question_answers(
            "q1", {"questions": QUESTIONS}, {"Which color do you prefer?": "Blue"}
        ),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "q1",
                "response": {
                    "behavior": "allow",
                    "updatedInput": {
                        "questions": QUESTIONS,
                        "answers": {"Which color do you prefer?": "Blue"},
                    },
                },
            },
        },
    ),
    (
        writer.control_error("p1", "daemon failed to ask the user"),
        {
            "type": "control_response",
            "response": {
                "subtype": "error",
                "request_id": "p1",
                "error": "daemon failed to ask the user",
            },
        },
    ),
    (
        writer.control_success("h1", {"hookSpecificOutput": {"hookEventName": "PreToolUse"}}),
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "h1",
                "response": {"hookSpecificOutput": {"hookEventName": "PreToolUse"}},
            },
        },
    ),
    (
        writer.interrupt("int_1"),
        {"type": "control_request", "request_id": "int_1", "request": {"subtype": "interrupt"}},
    ),
    (
        writer.initialize("init_1"),
        {
            "type": "control_request",
            "request_id": "init_1",
            "request": {"subtype": "initialize", "hooks": None},
        },
    ),
    (
        writer.control_request("rename_session", "rn", title="My daemon session"),
        {
            "type": "control_request",
            "request_id": "rn",
            "request": {"subtype": "rename_session", "title": "My daemon session"},
        },
    ),
]


@pytest.mark.parametrize(("line", "expected"), EXACT)
def test_exact_lines(line: bytes, expected: dict[str, Any]) -> None:
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == expected


def test_generated_ids_are_fresh_uuids() -> None:
    first = json.loads(writer.user_message("hi"))["uuid"]
    second = json.loads(writer.user_message("hi"))["uuid"]
    assert first != second
    assert uuid.UUID(first).version == 4
    request_ids = {json.loads(writer.interrupt())["request_id"] for _ in range(3)}
    assert len(request_ids) == 3


def test_user_message_with_content_blocks() -> None:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "data": "AA=="}},
    ]
    assert json.loads(writer.user_message(blocks, uuid=UUID))["message"]["content"] == blocks


@given(text=st.text(min_size=1).filter(str.strip))
def test_any_text_is_one_line_that_reads_back_the_same(text: str) -> None:
    line = writer.user_message(text, uuid=UUID)
    assert line.count(b"\n") == 1
    assert line.endswith(b"\n")
    assert json.loads(line)["message"]["content"] == text


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: writer.user_message(None), "text or a list of blocks"),  # type: ignore[arg-type]
        (lambda: writer.user_message(42), "text or a list of blocks"),  # type: ignore[arg-type]
        (lambda: writer.user_message({"role": "assistant"}), "text or a list of blocks"),  # type: ignore[arg-type]
        (lambda: writer.user_message("   "), "non-empty text"),
        (lambda: writer.user_message([]), "at least one content block"),
        (lambda: writer.user_message(["text"]), "object with a 'type'"),  # type: ignore[list-item]
        (lambda: writer.user_message("hi", uuid="not-a-uuid"), "uuid must be a UUID"),
        (lambda: writer.user_message("hi", uuid=UUID.replace("-", "")), "uuid must be a UUID"),
        (
            lambda: writer.user_message([{"type": "text", "text": object()}]),
            "cannot write this user as JSON",
        ),
        (lambda: writer.permission_deny("r", ""), "non-empty message"),
        (lambda: writer.permission_deny("r", "  \n"), "non-empty message"),
        (
            lambda: writer.permission_allow("r", updated_input=["ls"]),  # type: ignore[arg-type]
            "updated_input must be an object",
        ),
        (lambda: writer.permission_allow("r", updated_input={"x": 1j}), "cannot write"),
        (lambda: writer.permission_allow("r", updated_permissions=[None]), "list of objects"),  # type: ignore[list-item]
        (lambda: writer.permission_allow(""), "request_id must be non-empty"),
        (lambda: writer.question_answers("r", {"answers": {}}, {"q": "a"}), "with 'questions'"),
        (
            lambda: writer.question_answers("r", {"questions": QUESTIONS}, {"q": 1}),  # type: ignore[dict-item]
            "map question text",
        ),
        (lambda: writer.control_error("r", ""), "non-empty error"),
        (lambda: writer.control_request(""), "needs a subtype"),
        (lambda: writer.control_request("x", "r", payload=float), "cannot write"),
    ],
)
def test_refusals(build: Any, message: str) -> None:
    with pytest.raises(ProtocolWriteError, match=message):
        build()


def test_self_referencing_payload_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ProtocolWriteError, match="cannot write"):
        writer.control_request("x", "r", data=loop)


def test_dart_allow_uses_snake_case_fields() -> None:
    line = writer.permission_allow(
        "cb",
        updated_input={"a": 1},
        updated_permissions=[],
        dialect=Dialect.DART_SDK,
        tool_use_id="t",
    )
    assert json.loads(line)["response"]["response"] == {
        "behavior": "allow",
        "updated_input": {"a": 1},
        "updated_permissions": [],
        "tool_use_id": "t",
    }
    assert json.loads(writer.permission_allow("r", tool_use_id="t"))["response"]["response"] == {
        "behavior": "allow",
        "toolUseID": "t",
    }


@pytest.mark.parametrize("dialect", list(Dialect))
def test_the_request_a_reply_answers_is_read_back_from_its_line(dialect: Dialect) -> None:
    replies = [
        writer.permission_allow("req-1", updated_input={"command": "ls"}, dialect=dialect),
        writer.permission_deny("req-1", "no", dialect=dialect),
        writer.control_error("req-1", "not supported", dialect=dialect),
    ]
    assert [writer.answered_request_id(line) for line in replies] == ["req-1"] * 3


@pytest.mark.parametrize(
    "line",
    [
        writer.user_message("hi", uuid=UUID),
        writer.interrupt("req-1"),  # a request, not a reply
        b'{"type":"control_response","response":{"subtype":"success"}}\n',  # no request_id
        b'{"type":"control_response",',  # cut short
    ],
)
def test_any_other_line_answers_no_request(line: bytes) -> None:
    assert writer.answered_request_id(line) is None
