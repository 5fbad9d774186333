"""Application error codes (docs/GRPC.md#error-codes), the status class of each, and how a code
travels.

Domain code raises ``BetCodeError(code, message, details)``. Each code has one canonical status
(the gRPC status vocabulary, which the web client maps onto HTTP statuses and the CLI onto exit
codes). A gRPC client gets the status, the message, and the code and details as trailing
metadata (``betcode-error-code``, and ``betcode-error-details-bin`` holding the details as UTF-8
JSON); server/errors.py turns a raised error into that aborted call.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping

import grpc

ERROR_CODE_METADATA_KEY = "betcode-error-code"
# A "-bin" key carries any bytes, so detail values (paths, names) need no escaping rules.
ERROR_DETAILS_METADATA_KEY = "betcode-error-details-bin"


class ErrorCode(enum.StrEnum):
    # The original set (docs/GRPC.md#error-codes).
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_CLOSED = "SESSION_CLOSED"
    SESSION_ACTIVE = "SESSION_ACTIVE"
    WORKTREE_NOT_FOUND = "WORKTREE_NOT_FOUND"
    WORKTREE_IN_USE = "WORKTREE_IN_USE"
    MACHINE_OFFLINE = "MACHINE_OFFLINE"
    NO_INPUT_LOCK = "NO_INPUT_LOCK"
    PERMISSION_TIMEOUT = "PERMISSION_TIMEOUT"
    PERMISSION_STALE = "PERMISSION_STALE"
    SUBAGENT_LIMIT = "SUBAGENT_LIMIT"
    POOL_EXHAUSTED = "POOL_EXHAUSTED"
    TUNNEL_DISCONNECTED = "TUNNEL_DISCONNECTED"
    RATE_LIMITED = "RATE_LIMITED"
    INVALID_PERMISSION_CONFIG = "INVALID_PERMISSION_CONFIG"
    DAG_CYCLE = "DAG_CYCLE"
    COMPACTION_FAILED = "COMPACTION_FAILED"
    SUBPROCESS_CRASHED = "SUBPROCESS_CRASHED"
    SQLITE_ERROR = "SQLITE_ERROR"
    # Added for the statuses the original set gives no code for.
    INVALID_REQUEST = "INVALID_REQUEST"
    PERMISSION_NOT_FOUND = "PERMISSION_NOT_FOUND"
    SEQUENCE_OUT_OF_RANGE = "SEQUENCE_OUT_OF_RANGE"
    NOT_IMPLEMENTED = "NOT_IMPLEMENTED"
    NOTHING_TO_COMPACT = "NOTHING_TO_COMPACT"
    INTERNAL = "INTERNAL"
    # A Converse client that sent heartbeats went silent; its stream was closed (reconnect).
    CLIENT_SILENT = "CLIENT_SILENT"
    # A turn cut off by a daemon restart (stored by storage.reconcile; the next message resumes).
    TURN_INTERRUPTED = "TURN_INTERRUPTED"
    # claude stopped on purpose by a plain `daemon stop` during a turn (no crash; the message
    # says how the session continues once the daemon is back).
    DAEMON_STOPPED = "DAEMON_STOPPED"
    # A service command this daemon knows but will not run (CommandService; the message says why).
    COMMAND_REFUSED = "COMMAND_REFUSED"
    # Subagents: an unknown subagent / orchestration id; a step asking for a worktree of its
    # own on a daemon without the worktree service.
    SUBAGENT_NOT_FOUND = "SUBAGENT_NOT_FOUND"
    ORCHESTRATION_NOT_FOUND = "ORCHESTRATION_NOT_FOUND"
    WORKTREE_UNAVAILABLE = "WORKTREE_UNAVAILABLE"
    # An answer to a subagent's question withdrawn at the end of its run (the message says
    # how it ended); answering would start its stopped claude again.
    PERMISSION_WITHDRAWN = "PERMISSION_WITHDRAWN"
    # Repositories and worktrees (issue 13).
    ALREADY_EXISTS = "ALREADY_EXISTS"
    NOT_FOUND = "NOT_FOUND"
    WORK_AT_RISK = "WORK_AT_RISK"  # a removal would lose work: details list it
    PRECONDITION_FAILED = "PRECONDITION_FAILED"
    WORKTREE_MISSING = "WORKTREE_MISSING"  # its directory is gone: claude is never spawned
    WORKDIR_MISSING = "WORKDIR_MISSING"  # a session's directory is gone (`sessions move`)
    PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"  # leads outside the allowed tree (symlink, '..')
    DISK_FULL = "DISK_FULL"
    GIT_FAILED = "GIT_FAILED"


GRPC_STATUS: Mapping[ErrorCode, grpc.StatusCode] = {
    ErrorCode.SESSION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.SESSION_CLOSED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.SESSION_ACTIVE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.WORKTREE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.WORKTREE_IN_USE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.MACHINE_OFFLINE: grpc.StatusCode.UNAVAILABLE,
    # The daemon-core issue asks for FAILED_PRECONDITION (the lock is state, not authorisation).
    ErrorCode.NO_INPUT_LOCK: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PERMISSION_TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.PERMISSION_STALE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.SUBAGENT_LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.POOL_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.TUNNEL_DISCONNECTED: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.INVALID_PERMISSION_CONFIG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.DAG_CYCLE: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.COMPACTION_FAILED: grpc.StatusCode.INTERNAL,
    ErrorCode.SUBPROCESS_CRASHED: grpc.StatusCode.INTERNAL,
    ErrorCode.SQLITE_ERROR: grpc.StatusCode.INTERNAL,
    ErrorCode.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.PERMISSION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.SEQUENCE_OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    ErrorCode.NOT_IMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.NOTHING_TO_COMPACT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.CLIENT_SILENT: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.TURN_INTERRUPTED: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DAEMON_STOPPED: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.COMMAND_REFUSED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.SUBAGENT_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.ORCHESTRATION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.WORKTREE_UNAVAILABLE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PERMISSION_WITHDRAWN: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.WORK_AT_RISK: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PRECONDITION_FAILED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.WORKTREE_MISSING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.WORKDIR_MISSING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PATH_NOT_ALLOWED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.DISK_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.GIT_FAILED: grpc.StatusCode.INTERNAL,
}


class BetCodeError(Exception):
    """An error a client should see: an application code, a message a user can act on, and
    string details (e.g. ``session_id``, ``holder_client_id``, ``retry_after_ms``)."""

    def __init__(
        self, code: ErrorCode, message: str, details: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, str] = dict(details or {})

    @property
    def status(self) -> grpc.StatusCode:
        return GRPC_STATUS[self.code]

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        details = json.dumps(self.details, sort_keys=True, ensure_ascii=False).encode()
        return (
            (ERROR_CODE_METADATA_KEY, self.code.value),
            (ERROR_DETAILS_METADATA_KEY, details),
        )


def error_code_of(error: grpc.aio.AioRpcError) -> ErrorCode | None:
    """The application code a BetCode server attached to a failed call (client side)."""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_CODE_METADATA_KEY:
            try:
                return ErrorCode(value)
            except ValueError:
                return None
    return None


def error_details_of(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """The details a BetCode server attached to a failed call (client side)."""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_DETAILS_METADATA_KEY and isinstance(value, bytes):
            try:
                decoded = json.loads(value)
            except ValueError:
                return {}
            if isinstance(decoded, dict):
                return {str(k): str(v) for k, v in decoded.items()}
    return {}
