"""The `betcode` command's exit codes (docs/CLI.md#exit-codes) and the code for an ErrorEvent.

0 success · 1 agent error · 2 connection failure · 3 permission denied · 4 rate limited ·
5 invalid arguments · 6 session not found · 7 internal error.

An ErrorEvent's application code maps onto a gRPC status (`core.errors`, docs/GRPC.md#error-codes),
and the status onto an exit code the way a failed call does (`connection.EXIT_CODE_OF_STATUS`). Two
codes say more than their status: AGENT_ERROR is claude's own failed turn (1, or 4 when the model
API answered 429), and SUBPROCESS_CRASHED is claude dying mid-turn (INTERNAL: 7).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import grpc

from betcode.cli.connection import EXIT_CODE_OF_STATUS
from betcode.core.errors import GRPC_STATUS, ErrorCode


class ExitCode(enum.IntEnum):
    OK = 0
    AGENT_ERROR = 1
    CONNECTION = 2
    PERMISSION_DENIED = 3
    RATE_LIMITED = 4
    INVALID_ARGUMENTS = 5
    SESSION_NOT_FOUND = 6
    INTERNAL = 7


AGENT_ERROR_CODE = "AGENT_ERROR"  # a turn claude itself ended with is_error (event_builders)
RATE_LIMIT_HTTP_STATUS = "429"


def exit_code_of_error(code: str, details: Mapping[str, str]) -> ExitCode:
    """The exit code for an ErrorEvent with this application code and details."""
    if code == AGENT_ERROR_CODE:
        if details.get("api_error_status") == RATE_LIMIT_HTTP_STATUS:
            return ExitCode.RATE_LIMITED
        return ExitCode.AGENT_ERROR
    try:
        status = GRPC_STATUS[ErrorCode(code)]
    except ValueError:
        return ExitCode.AGENT_ERROR  # a code claude reported itself (Dart dialect error lines)
    if status == grpc.StatusCode.NOT_FOUND:
        return ExitCode.SESSION_NOT_FOUND
    if status == grpc.StatusCode.UNAVAILABLE:
        return ExitCode.CONNECTION
    return ExitCode(EXIT_CODE_OF_STATUS.get(status, ExitCode.INTERNAL))


def retry_after_seconds(details: Mapping[str, str], default: float = 1.0) -> int:
    """Seconds to wait before retrying a rate-limited request (`retry_after_ms`, default 1 s),
    rounded up so "Retry after 0 seconds" is never printed."""
    try:
        milliseconds = float(details.get("retry_after_ms", default * 1000))
    except ValueError:
        milliseconds = default * 1000
    return max(1, -int(-milliseconds // 1000))
