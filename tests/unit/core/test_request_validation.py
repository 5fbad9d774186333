"""The request-field checks: what passes unchanged, and the message a refused field gets."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import struct_pb2

from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import (
    MAX_TEXT_BYTES,
    check_answers,
    check_client_type,
    check_id,
    check_name,
    check_text,
    domain_error,
    input_object,
)
from betcode.permissions.decisions import AnswerError
from betcode.sessions.input_lock import NoInputLock
from betcode.sessions.manager import InvalidSessionRequest, SessionLimitReached, SessionNotFound
from betcode.v1 import agent_pb2

MiB = MAX_TEXT_BYTES
UUID = "4f7d7158-3eeb-4a1a-9cd3-d06c65dbdf94"


def with_input(**values: Any) -> agent_pb2.AnswerPermissionRequest:
    request = agent_pb2.AnswerPermissionRequest()
    request.updated_input.update(values)
    return request


ACCEPTED: list[tuple[str, Callable[[], object], object]] = [
    ("uuid id", lambda: check_id(UUID, "id"), UUID),
    ("128-char id", lambda: check_id("a" * 128, "id"), "a" * 128),
    ("optional empty id", lambda: check_id("", "id", required=False), ""),
    ("1 MiB text", lambda: check_text("x" * MiB, "text"), "x" * MiB),
    ("multi-byte text at the limit", lambda: check_text("é" * (MiB // 2), "t"), "é" * (MiB // 2)),
    ("empty optional text", lambda: check_text("", "text"), ""),
    ("empty name (no name)", lambda: check_name("", "name"), ""),
    ("name with spaces", lambda: check_name("fix the build", "name"), "fix the build"),
    ("no client type", lambda: check_client_type(""), "cli"),
    ("flutter", lambda: check_client_type("flutter"), "flutter"),
    (
        "absent input",
        lambda: input_object(agent_pb2.AnswerPermissionRequest(), "updated_input"),
        None,
    ),
    (
        "nested input",
        lambda: input_object(with_input(a=[1, {"b": None}]), "updated_input"),
        {"a": [1, {"b": None}]},
    ),
    ("answers", lambda: check_answers({"Which?": "This one"}, "answers"), {"Which?": "This one"}),
]

REFUSED: list[tuple[str, Callable[[], object], str]] = [
    ("missing id", lambda: check_id("", "request_id"), "request_id is required"),
    (
        "129-char id",
        lambda: check_id("a" * 129, "session_id"),
        "session_id is 129 characters; at most 128 are allowed",
    ),
    (
        "id with a space",
        lambda: check_id("a b", "session_id"),
        "must be printable and contain no whitespace",
    ),
    ("id with a tab", lambda: check_id("a\tb", "session_id"), "no whitespace"),
    ("id with NUL", lambda: check_id("a\x00b", "session_id"), "printable"),
    ("id with DEL", lambda: check_id("a\x7fb", "session_id"), "printable"),
    (
        "text over 1 MiB",
        lambda: check_text("x" * (MiB + 1), "the message"),
        f"the message is {MiB + 1} bytes; at most {MiB} bytes are accepted",
    ),
    (
        "multi-byte text over",
        lambda: check_text("é" * (MiB // 2 + 1), "t"),
        f"t is {MiB + 2} bytes",
    ),
    (
        "required blank text",
        lambda: check_text(" \n", "the message", required=True),
        "the message is empty",
    ),
    ("two-line name", lambda: check_name("a\nb", "name"), "name must be one line"),
    ("257-char name", lambda: check_name("n" * 257, "name"), "name is 257 characters; at most 256"),
    (
        "unknown client type",
        lambda: check_client_type("robot"),
        "client_type 'robot' is not one of cli, flutter, headless",
    ),
    (
        "web client type over gRPC (only the daemon's web transport records it)",
        lambda: check_client_type("web"),
        "client_type 'web' is not one of cli, flutter, headless",
    ),
    (
        "NaN input",
        lambda: input_object(with_input(a=math.nan), "updated_input"),
        "updated_input holds a NaN",
    ),
    (
        "deep infinity",
        lambda: input_object(with_input(a=[{"b": [-math.inf]}]), "updated_input"),
        "NaN or infinite",
    ),
    (
        "input over 1 MiB",
        lambda: input_object(with_input(a="x" * MiB), "updated_input"),
        f"at most {MiB} bytes",
    ),
    (
        "answers over 1 MiB",
        lambda: check_answers({"q": "x" * MiB}, "answers"),
        f"answers are {MiB + 1} bytes",
    ),
]


@pytest.mark.parametrize(
    ("check", "expected"), [r[1:] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED]
)
def test_accepted_values_pass_unchanged(check: Callable[[], object], expected: object) -> None:
    assert check() == expected


@pytest.mark.parametrize(("check", "says"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_values_name_the_field_and_the_limit(
    check: Callable[[], object], says: str
) -> None:
    with pytest.raises(BetCodeError) as refused:
        check()
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    assert says in refused.value.message


def test_an_empty_value_is_json_null() -> None:
    request = agent_pb2.AnswerPermissionRequest()
    request.updated_input.fields["a"].CopyFrom(struct_pb2.Value())
    assert input_object(request, "updated_input") == {"a": None}


@pytest.mark.parametrize(
    ("exc", "code", "details"),
    [
        (SessionNotFound("s1"), ErrorCode.SESSION_NOT_FOUND, {"session_id": "s1"}),
        (
            SessionLimitReached(2, 2),
            ErrorCode.POOL_EXHAUSTED,
            {"max_sessions": "2", "in_use": "2"},
        ),
        (InvalidSessionRequest("bad cwd"), ErrorCode.INVALID_REQUEST, {}),
        (NoInputLock("me", "you"), ErrorCode.NO_INPUT_LOCK, {"holder_client_id": "you"}),
        (AnswerError.not_found("r1"), ErrorCode.PERMISSION_NOT_FOUND, {}),
        (AnswerError.stale("r1"), ErrorCode.PERMISSION_STALE, {}),
        (AnswerError("PERMISSION_WITHDRAWN", "gone"), ErrorCode.PERMISSION_WITHDRAWN, {}),
        (AnswerError.invalid("no"), ErrorCode.INVALID_REQUEST, {}),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_domain_refusals_map_onto_wire_codes(
    exc: Exception, code: ErrorCode, details: dict[str, str]
) -> None:
    error = domain_error(exc)
    assert error is not None
    assert (error.code, error.details, error.message) == (code, details, str(exc))


def test_an_unexpected_exception_is_not_disguised() -> None:
    assert domain_error(KeyError("bug")) is None


def test_a_database_failure_is_named() -> None:
    error = domain_error(sqlite3.OperationalError("disk I/O error"))
    assert error is not None
    assert (error.code, error.message) == (
        ErrorCode.SQLITE_ERROR,
        "the daemon's database failed: disk I/O error",
    )
