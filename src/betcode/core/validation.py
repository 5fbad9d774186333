"""Checks on request fields, made before any domain call, and the mapping of the domain's
refusals onto wire errors.

A field that fails is an INVALID_REQUEST (gRPC INVALID_ARGUMENT) whose message names the field,
what is wrong and the limit, and the request changes nothing. Each check returns the value it
accepted, so a service reads `check_id(request.session_id, "session_id")` inline.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from typing import Any, Literal, get_args

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from betcode.claude.process import (
    ClaudeStartError,
    ClaudeStdinClosed,
    WorkdirMissing,
    WorktreeMissing,
)
from betcode.claude.supervisor import SupervisorCrashed
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.limits.admission import BadLimit
from betcode.permissions.decisions import AnswerError
from betcode.sessions.input_lock import NoInputLock
from betcode.sessions.manager import (
    MAX_SESSION_ID_CHARS,
    InvalidSessionRequest,
    SessionLimitReached,
    SessionNotFound,
    WorktreeNotFound,
)
from betcode.sessions.session import StreamsEnded
from betcode.storage.errors import StorageError

MAX_ID_CHARS = MAX_SESSION_ID_CHARS
MAX_TEXT_BYTES = 1024 * 1024  # a prompt, a deny message, an edited tool input, answers
MAX_NAME_CHARS = 256
# The client types a gRPC client may name (StartConversation, NegotiateRequest;
# docs/GRPC.md#client-types). Not `web`: the daemon records that for the browser pages its own web
# transport serves (ids
# `web-...`, let in by the web token), so a `web` row always is one of them, and a gRPC
# client, local or relayed, cannot pass itself off as one.
GrpcClientType = Literal["cli", "flutter", "headless"]
GRPC_CLIENT_TYPES: tuple[GrpcClientType, ...] = get_args(GrpcClientType)
DEFAULT_CLIENT_TYPE: GrpcClientType = "cli"


def domain_error(exc: Exception) -> BetCodeError | None:
    """The wire error for a domain refusal (the request cannot be carried out, the client is
    told why); None for any other exception, which is a bug."""
    if isinstance(exc, SessionNotFound):
        return BetCodeError(ErrorCode.SESSION_NOT_FOUND, str(exc), {"session_id": exc.session_id})
    if isinstance(exc, WorktreeNotFound):
        return BetCodeError(
            ErrorCode.WORKTREE_NOT_FOUND, str(exc), {"worktree_id": exc.worktree_id}
        )
    if isinstance(exc, InvalidSessionRequest | BadLimit):
        return BetCodeError(ErrorCode.INVALID_REQUEST, str(exc))
    if isinstance(exc, SessionLimitReached):
        details = {"max_sessions": str(exc.limit), "in_use": str(exc.in_use)}
        return BetCodeError(ErrorCode.POOL_EXHAUSTED, str(exc), details)
    if isinstance(exc, NoInputLock):
        return BetCodeError(
            ErrorCode.NO_INPUT_LOCK, str(exc), {"holder_client_id": exc.holder or ""}
        )
    if isinstance(exc, AnswerError):
        code = {
            "PERMISSION_NOT_FOUND": ErrorCode.PERMISSION_NOT_FOUND,
            "PERMISSION_STALE": ErrorCode.PERMISSION_STALE,
            "PERMISSION_WITHDRAWN": ErrorCode.PERMISSION_WITHDRAWN,
        }.get(exc.code, ErrorCode.INVALID_REQUEST)
        return BetCodeError(code, str(exc))
    if isinstance(exc, SupervisorCrashed):
        return BetCodeError(
            ErrorCode.SUBPROCESS_CRASHED,
            f"claude crashed too often in this session ({exc}); "
            "send a message to try again, or start a new session",
        )
    if isinstance(exc, WorktreeMissing):
        return BetCodeError(ErrorCode.WORKTREE_MISSING, str(exc), {"path": str(exc.cwd)})
    if isinstance(exc, WorkdirMissing):
        return BetCodeError(ErrorCode.WORKDIR_MISSING, str(exc), {"path": str(exc.cwd)})
    if isinstance(exc, ClaudeStartError | ClaudeStdinClosed):
        return BetCodeError(ErrorCode.SUBPROCESS_CRASHED, f"claude did not take the input: {exc}")
    if isinstance(exc, StreamsEnded):
        return BetCodeError(ErrorCode.DAEMON_STOPPED, str(exc))
    if isinstance(exc, sqlite3.Error | StorageError):
        return BetCodeError(ErrorCode.SQLITE_ERROR, f"the daemon's database failed: {exc}")
    return None


def invalid(message: str) -> BetCodeError:
    return BetCodeError(ErrorCode.INVALID_REQUEST, message)


def check_id(value: str, field: str, *, required: bool = True) -> str:
    """An identifier: 1–128 printable characters without whitespace ("" allowed if optional)."""
    if not value:
        if required:
            raise invalid(f"{field} is required")
        return value
    if len(value) > MAX_ID_CHARS:
        raise invalid(f"{field} is {len(value)} characters; at most {MAX_ID_CHARS} are allowed")
    if not value.isprintable() or any(ch.isspace() for ch in value):
        raise invalid(f"{field} must be printable and contain no whitespace")
    return value


def check_text(value: str, field: str, *, required: bool = False) -> str:
    """Free text for claude or a user (a prompt, a deny message): at most 1 MiB of UTF-8."""
    size = len(value.encode())
    if size > MAX_TEXT_BYTES:
        raise invalid(f"{field} is {size} bytes; at most {MAX_TEXT_BYTES} bytes are accepted")
    if required and not value.strip():
        raise invalid(f"{field} is empty")
    return value


def check_name(value: str, field: str) -> str:
    """A one-line label (a session name)."""
    if len(value) > MAX_NAME_CHARS:
        raise invalid(f"{field} is {len(value)} characters; at most {MAX_NAME_CHARS} are allowed")
    if not value.isprintable():
        raise invalid(f"{field} must be one line of printable characters")
    return value


def check_answers(answers: Mapping[str, str], field: str) -> dict[str, str]:
    """Question text → answer, at most 1 MiB in all."""
    size = sum(len(key.encode()) + len(value.encode()) for key, value in answers.items())
    if size > MAX_TEXT_BYTES:
        raise invalid(f"{field} are {size} bytes; at most {MAX_TEXT_BYTES} bytes are accepted")
    return dict(answers)


def check_client_type(value: str) -> GrpcClientType:
    if not value:
        return DEFAULT_CLIENT_TYPE
    for client_type in GRPC_CLIENT_TYPES:
        if value == client_type:
            return client_type
    raise invalid(f"client_type {value!r} is not one of {', '.join(GRPC_CLIENT_TYPES)}")


def input_object(message: Message, field: str) -> dict[str, Any] | None:
    """A Struct field as the JSON object claude will get (None when absent): at most 1 MiB,
    and only finite numbers, since NaN and infinities have no JSON form."""
    if not message.HasField(field):
        return None
    struct: struct_pb2.Struct = getattr(message, field)
    size = struct.ByteSize()
    if size > MAX_TEXT_BYTES:
        raise invalid(f"{field} is {size} bytes; at most {MAX_TEXT_BYTES} bytes are accepted")
    if not _finite(struct):
        raise invalid(f"{field} holds a NaN or infinite number, which JSON cannot carry")
    return dict(json_format.MessageToDict(struct))


def _finite(value: struct_pb2.Struct | struct_pb2.ListValue | struct_pb2.Value) -> bool:
    if isinstance(value, struct_pb2.Struct):
        return all(_finite(item) for item in value.fields.values())
    if isinstance(value, struct_pb2.ListValue):
        return all(_finite(item) for item in value.values)
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return math.isfinite(value.number_value)
    if kind == "struct_value":
        return _finite(value.struct_value)
    if kind == "list_value":
        return _finite(value.list_value)
    return True
