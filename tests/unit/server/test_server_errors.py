"""Application error codes → gRPC status (docs/GRPC.md#error-codes), and the decorator services
use."""

from __future__ import annotations

import grpc
import pytest

from betcode.core.errors import GRPC_STATUS, BetCodeError, ErrorCode
from betcode.server.errors import handles_errors

S = grpc.StatusCode
ERROR_CODE_TABLE = {
    "SESSION_NOT_FOUND": S.NOT_FOUND,
    "SESSION_CLOSED": S.FAILED_PRECONDITION,
    "SESSION_ACTIVE": S.FAILED_PRECONDITION,
    "WORKTREE_NOT_FOUND": S.NOT_FOUND,
    "WORKTREE_IN_USE": S.RESOURCE_EXHAUSTED,
    "MACHINE_OFFLINE": S.UNAVAILABLE,
    "NO_INPUT_LOCK": S.FAILED_PRECONDITION,
    "PERMISSION_TIMEOUT": S.DEADLINE_EXCEEDED,
    "PERMISSION_STALE": S.FAILED_PRECONDITION,
    "SUBAGENT_LIMIT": S.RESOURCE_EXHAUSTED,
    "POOL_EXHAUSTED": S.RESOURCE_EXHAUSTED,
    "TUNNEL_DISCONNECTED": S.UNAVAILABLE,
    "RATE_LIMITED": S.RESOURCE_EXHAUSTED,
    "INVALID_PERMISSION_CONFIG": S.INVALID_ARGUMENT,
    "DAG_CYCLE": S.INVALID_ARGUMENT,
    "COMPACTION_FAILED": S.INTERNAL,
    "SUBPROCESS_CRASHED": S.INTERNAL,
    "SQLITE_ERROR": S.INTERNAL,
}


@pytest.mark.parametrize(("code", "status"), ERROR_CODE_TABLE.items())
def test_digest_codes_map_to_their_status(code: str, status: grpc.StatusCode) -> None:
    assert BetCodeError(ErrorCode(code), "m").status == status


def test_every_code_has_a_status() -> None:
    assert set(GRPC_STATUS) == set(ErrorCode)


def test_details_travel_as_json_in_binary_metadata() -> None:
    error = BetCodeError(ErrorCode.NO_INPUT_LOCK, "m", {"holder_client_id": "cli-ä"})
    assert error.trailing_metadata() == (
        ("betcode-error-code", "NO_INPUT_LOCK"),
        ("betcode-error-details-bin", '{"holder_client_id": "cli-ä"}'.encode()),
    )


def test_handles_errors_refuses_a_sync_handler() -> None:
    def sync_handler(request: object, context: object) -> None: ...

    with pytest.raises(TypeError, match="must be `async def`"):
        handles_errors(sync_handler)
