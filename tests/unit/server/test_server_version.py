"""VersionService: GetVersion over the socket, and the negotiation rules as a table."""

from __future__ import annotations

import grpc
import pytest
from server_harness import CAPABILITIES

from betcode.core.errors import BetCodeError, ErrorCode, error_code_of
from betcode.server.version_service import ServerCapabilities, VersionService, negotiate
from betcode.v1 import version_pb2, version_pb2_grpc


async def test_get_version(channel: grpc.aio.Channel) -> None:
    response = await version_pb2_grpc.VersionServiceStub(channel).GetVersion(
        version_pb2.GetVersionRequest()
    )
    assert response.api_version == "v1"
    assert response.server_version == "0.1.0"
    assert list(response.features) == ["batched_stream", "streaming_deltas"]
    assert response.claude_code.version == "2.1.330"
    assert response.claude_code.compatibility == version_pb2.FULLY_COMPATIBLE
    assert response.constraints.min_client_version == "0.1.0"


async def test_get_version_before_claude_is_known() -> None:
    service = VersionService(CAPABILITIES, lambda: None)
    response = await service.GetVersion(version_pb2.GetVersionRequest(), context=None)
    assert not response.HasField("claude_code")


async def test_a_malformed_client_version_is_invalid_argument(channel: grpc.aio.Channel) -> None:
    stub = version_pb2_grpc.VersionServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.NegotiateCapabilities(version_pb2.NegotiateRequest(client_version="latest"))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "expected MAJOR.MINOR.PATCH" in (failure.value.details() or "")
    assert error_code_of(failure.value) == ErrorCode.INVALID_REQUEST


async def test_negotiate_over_the_socket(channel: grpc.aio.Channel) -> None:
    response = await version_pb2_grpc.VersionServiceStub(channel).NegotiateCapabilities(
        version_pb2.NegotiateRequest(client_version="0.1.0", client_type="cli")
    )
    assert response.accepted
    assert response.capabilities.max_message_size == CAPABILITIES.max_message_bytes


SERVER = ServerCapabilities(
    server_version="0.3.0",
    feature_flags={"streaming_deltas": True, "legacy_permission_format": True, "subagents": False},
    max_message_bytes=1024,
    deprecated_features={"legacy_permission_format": "permission_bridge"},
)

# (client_version, client_type, requested, accepted, granted, warnings)
NEGOTIATION_TABLE = [
    ("0.1.0", "cli", [], True, [], []),
    ("v2.0.1-beta.1", "headless", ["streaming_deltas"], True, ["streaming_deltas"], []),
    ("0.0.9", "cli", ["streaming_deltas"], False, [], []),
    (
        "0.2.0",
        "flutter",
        ["subagents", "teleport"],
        True,
        [],
        [
            "feature 'subagents' is not available on this server",
            "feature 'teleport' is not available on this server",
        ],
    ),
    (
        "0.2.0",
        "web",
        ["legacy_permission_format"],
        True,
        ["legacy_permission_format"],
        [
            "unknown client_type 'web' (known: cli, flutter, headless)",
            "feature 'legacy_permission_format' is deprecated; use 'permission_bridge'",
        ],
    ),
]


@pytest.mark.parametrize(
    ("version", "client_type", "requested", "accepted", "granted", "warnings"),
    NEGOTIATION_TABLE,
)
def test_negotiation(
    version: str,
    client_type: str,
    requested: list[str],
    accepted: bool,
    granted: list[str],
    warnings: list[str],
) -> None:
    request = version_pb2.NegotiateRequest(
        client_version=version, client_type=client_type, requested_features=requested
    )
    response = negotiate(request, SERVER)
    assert response.accepted is accepted
    assert list(response.granted_features) == granted
    assert list(response.warnings) == warnings
    if not accepted:
        assert "older than the oldest supported client 0.1.0" in response.rejection_reason
    else:
        assert dict(response.capabilities.feature_flags) == dict(SERVER.feature_flags)


@pytest.mark.parametrize("version", ["", "1.2", "1.2.3.4", "one.two.three", "1.2.3 beta"])
def test_versions_that_are_not_versions(version: str) -> None:
    with pytest.raises(BetCodeError) as failure:
        negotiate(version_pb2.NegotiateRequest(client_version=version), SERVER)
    assert failure.value.code == ErrorCode.INVALID_REQUEST
