"""The tolerant reader's rules (docs/PROTOCOL.md#tolerant-reading): it never raises, and says what
it skipped."""

# The tests assert a state, change it through a method, and assert it again: mypy keeps the
# first assertion's narrowing across the call and takes what follows for unreachable.
# mypy: disable-error-code="unreachable"

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from betcode.protocol.framing import Line
from betcode.protocol.messages import (
    AssistantMessage,
    ControlRequest,
    Result,
    StreamEvent,
    SystemInit,
    Unknown,
    Usage,
)
from betcode.protocol.reader import UNKNOWN_TYPES_WARNING_AT, ProtocolReader

READER_LOGGER = "betcode.protocol.reader"


def test_unknown_fields_are_ignored() -> None:
    reader = ProtocolReader()
    line = {
        "type": "system",
        "subtype": "init",
        "session_id": "test-123",
        "tools": ["Bash"],
        "model": "claude-sonnet-4-20250514",
        "cwd": "/tmp",
        "unknown_field": "should be ignored",
        "another_unknown": {"nested": True},
    }
    message = reader.decode(json.dumps(line).encode())
    assert isinstance(message, SystemInit)
    assert message.session_id == "test-123"
    assert reader.stats.parse_errors_tolerated == 0


def test_numbers_and_booleans_given_as_strings_are_accepted() -> None:
    reader = ProtocolReader()
    result = reader.decode(
        b'{"type":"result","subtype":"success","is_error":"false","num_turns":"3","duration_ms":"147.0",'
        b'"total_cost_usd":"0.5","usage":{"input_tokens":"10","output_tokens":5}}'
    )
    assert isinstance(result, Result)
    assert (result.num_turns, result.duration_ms, result.total_cost_usd) == (3, 147, 0.5)
    assert result.is_error is False
    assert result.usage == Usage(input_tokens=10, output_tokens=5)
    event = reader.decode(
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":"2",'
        b'"delta":{"type":"text_delta","text":"x"}}}'
    )
    assert isinstance(event, StreamEvent)
    assert event.index == 2
    assert reader.stats.parse_errors_tolerated == 0


def test_missing_optional_fields_get_defaults() -> None:
    reader = ProtocolReader()
    assert reader.decode(b'{"type":"result"}') == Result()
    assert reader.decode(b'{"type":"assistant"}') == AssistantMessage()
    assert reader.decode(b'{"type":"stream_event"}') == StreamEvent()
    result = reader.decode(b'{"type":"result","subtype":"error","error":"Rate limit exceeded"}')
    assert isinstance(result, Result)
    assert result.is_error  # the seed's error variant: no is_error field
    assert result.errors == ["Rate limit exceeded"]
    assert reader.stats.parse_errors_tolerated == 0


def test_wrong_typed_fields_are_read_best_effort_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = ProtocolReader()
    with caplog.at_level(logging.WARNING, logger=READER_LOGGER):
        message = reader.decode(
            b'{"type":"assistant","message":"oops","session_id":"s","uuid":["not","text"]}'
        )
        event = reader.decode(
            b'{"type":"stream_event","event":{"type":"content_block_delta","index":"two",'
            b'"delta":{"type":"text_delta","text":"kept"}},"uuid":"u"}'
        )
    assert message == AssistantMessage(session_id="s")
    assert isinstance(event, StreamEvent)
    assert (event.index, event.text, event.uuid) == (None, "kept", "u")
    assert reader.stats.parse_errors_tolerated == 2
    assert "$.message: expected an object, got 'oops'" in caplog.text
    assert "$.event.index: expected a number, got 'two'" in caplog.text


def test_control_request_without_request_id_is_kept_but_not_answerable() -> None:
    reader = ProtocolReader()
    line = b'{"type":"control_request","request":{"subtype":"can_use_tool","tool_name":"Bash"}}'
    message = reader.decode(line)
    assert isinstance(message, Unknown)
    assert message.type == "control_request"
    assert reader.stats.parse_errors_tolerated == 1
    assert not reader.stats.unknown_types


@pytest.mark.parametrize(
    ("line", "counter"),
    [
        (b"{this is not json", "invalid_json"),
        (b'{"type":"result"', "invalid_json"),
        (b'{"type":"user","x":"\xff\xfe"}', "invalid_utf8"),
        (b"\xc3\x28 garbage", "invalid_utf8"),
        (b"null", "not_object"),
        (b"[1,2,3]", "not_object"),
        (b'"string"', "not_object"),
        (b"42", "not_object"),
    ],
)
def test_undecodable_lines_are_logged_counted_and_skipped(
    line: bytes, counter: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = ProtocolReader()
    with caplog.at_level(logging.WARNING, logger=READER_LOGGER):
        assert reader.decode(line) is None
    assert getattr(reader.stats, counter) == 1
    assert reader.stats.invalid == 1
    assert reader.stats.lines == 1
    assert "skipped a line" in caplog.text


def test_a_flood_of_bad_lines_is_logged_only_at_first(caplog: pytest.LogCaptureFixture) -> None:
    reader = ProtocolReader()
    with caplog.at_level(logging.WARNING, logger=READER_LOGGER):
        for _ in range(500):
            reader.decode(b"garbage")
    assert reader.stats.invalid_json == 500
    assert caplog.text.count("skipped a line") == 20
    assert caplog.text.count("counted, not logged") == 1


def test_unknown_types_are_kept_and_the_tenth_gives_one_warning_naming_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = ProtocolReader()
    kinds = ["tool_progress", "rate_limit_event", "auth_status"]
    with caplog.at_level(logging.INFO, logger=READER_LOGGER):
        for number in range(UNKNOWN_TYPES_WARNING_AT - 1):
            message = reader.decode(json.dumps({"type": kinds[number % 3], "n": number}).encode())
            assert message == Unknown(kinds[number % 3], {"type": kinds[number % 3], "n": number})
        assert not [r for r in caplog.records if r.levelno == logging.WARNING]
        for _ in range(30):
            reader.decode(b'{"type":"tool_progress"}')
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "10 lines of unknown message types" in warnings[0]
    assert all(kind in warnings[0] for kind in kinds)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 3  # the first line of each new type
    assert reader.stats.unknown_types == {
        "tool_progress": 33,
        "rate_limit_event": 3,
        "auth_status": 3,
    }


def test_init_without_bash_marks_the_stream_degraded(caplog: pytest.LogCaptureFixture) -> None:
    reader = ProtocolReader()
    with caplog.at_level(logging.WARNING, logger=READER_LOGGER):
        reader.decode(b'{"type":"system","subtype":"init","tools":["Task","Bash","Read"]}')
        assert not reader.degraded
        reader.decode(b'{"type":"system","subtype":"init","tools":["Glob","Grep","Read"]}')
    assert reader.degraded
    assert reader.degraded_reason is not None
    assert "Bash" in reader.degraded_reason
    assert "stream DEGRADED" in caplog.text
    reader.decode(b'{"type":"system","subtype":"init","tools":["Bash"]}')
    assert not reader.degraded
    assert reader.degraded_reason is None


def test_an_init_listing_tool_objects_is_read_with_their_schemas() -> None:
    reader = ProtocolReader()
    with_schema = (
        b'{"type":"system","subtype":"init","tools":[{"name":"Bash","description":"x",'
        b'"input_schema":{"type":"object"}}]}'
    )
    init = reader.decode(with_schema)
    assert isinstance(init, SystemInit)
    assert list(init.tools) == ["Bash"]
    assert init.tool_schemas == {"Bash": {"type": "object"}}
    assert not reader.degraded


def test_decode_line_counts_truncated_lines() -> None:
    reader = ProtocolReader()
    reader.decode_line(Line(b'{"type":"keep_alive"}', 30_000_000, True))
    reader.decode_line(Line(b'{"type":"keep_alive"}', 21, False))
    assert reader.stats.truncated == 1
    assert reader.stats.lines == 2


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_never_raises_on_any_bytes(data: bytes) -> None:
    ProtocolReader().decode(data)


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
_json_value = st.recursive(
    _json_leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)
_field_names = st.sampled_from(
    [
        "subtype", "message", "content", "event", "delta", "index", "request", "request_id",
        "tools", "usage", "is_error", "num_turns", "errors", "permission_denials", "modelUsage",
        "tool_use_result", "session_id", "uuid", "response", "origin", "input", "turn_count",
        "duration_seconds", "model",
    ]
)  # fmt: skip
_types = st.sampled_from(
    [
        "system", "assistant", "user", "stream_event", "control_request", "control_cancel_request",
        "control_response", "result", "keep_alive", "command_lifecycle", "conversation_reset",
        "callback.request", "session.created", "error", "brand_new",
    ]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(kind=_types, fields=st.dictionaries(_field_names, _json_value, max_size=6))
def test_never_raises_on_any_object_of_a_known_type(kind: str, fields: dict[str, object]) -> None:
    reader = ProtocolReader()
    data = json.dumps({"type": kind, **fields}).encode()
    assert reader.decode(data) is not None
    if kind != "brand_new":
        assert not reader.stats.unknown_types


def test_can_use_tool_is_read_with_each_dialect_remembered() -> None:
    reader = ProtocolReader()
    request = reader.decode(
        b'{"type":"control_request","request_id":"a","request":{"subtype":"can_use_tool","tool_name":"Bash"}}'
    )
    assert isinstance(request, ControlRequest)
    assert request.dialect == "stream_json"
