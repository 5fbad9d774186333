"""Stored pending requests → PendingPermission messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from betcode.core.convert import pending_permission
from betcode.storage.pending import PendingPermission


def row(tool_input: Any, *, is_question: bool = False) -> PendingPermission:
    return PendingPermission(
        request_id="r1",
        session_id="s1",
        tool_name="AskUserQuestion" if is_question else "Bash",
        tool_description="Run a command",
        input=json.dumps(tool_input),
        tool_use_id="toolu_1",
        dialect="stream_json",
        is_question=is_question,
        received_at=1_700_000_000.5,
        forwarded_at=None,
        expires_at=1_700_604_800.0,
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


def test_a_request_keeps_its_input_and_times() -> None:
    message = pending_permission(row({"command": "ls -la", "timeout": 5, "env": None}))
    assert (message.request_id, message.session_id, message.tool_name) == ("r1", "s1", "Bash")
    assert message.description == "Run a command"
    assert dict(message.input) == {"command": "ls -la", "timeout": 5.0, "env": None}
    assert message.received_at.ToNanoseconds() == 1_700_000_000_500_000_000
    assert message.expires_at.seconds == 1_700_604_800
    assert not message.is_question
    assert list(message.questions) == []


def test_a_question_lists_every_question() -> None:
    questions = [
        {"question": "Which?", "header": "Pick", "options": [{"label": "A"}], "multiSelect": True},
        {"question": "Why?", "header": "Reason", "options": ["because"]},
    ]
    message = pending_permission(row({"questions": questions}, is_question=True))
    assert message.is_question
    assert [(q.question, q.multi_select) for q in message.questions] == [
        ("Which?", True),
        ("Why?", False),
    ]


@pytest.mark.parametrize("stored", [[1, 2], "text", None, 3])
def test_an_input_that_is_not_an_object_is_shown_empty(stored: Any) -> None:
    for is_question in (False, True):
        message = pending_permission(row(stored, is_question=is_question))
        assert dict(message.input) == {}
        assert list(message.questions) == []
