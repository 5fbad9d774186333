"""betcode.v1.VersionService: the server's version and features, the claude CLI's
compatibility, and client capability negotiation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc

from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import GRPC_CLIENT_TYPES
from betcode.server.claude_status import ClaudeCodeProvider
from betcode.server.errors import handles_errors
from betcode.v1 import version_pb2

API_VERSION = "v1"
MIN_CLIENT_VERSION = "0.1.0"

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.+-]*)?")


@dataclass(frozen=True, slots=True)
class ServerCapabilities:
    server_version: str
    # Feature flag name → enabled; the enabled ones are the server's features.
    feature_flags: Mapping[str, bool]
    max_message_bytes: int
    available_models: tuple[str, ...] = ()
    available_tools: tuple[str, ...] = ()
    worktrees_enabled: bool = False
    subagents_enabled: bool = False
    deprecated_features: Mapping[str, str] = field(default_factory=dict)  # feature → replacement

    @property
    def features(self) -> list[str]:
        return sorted(name for name, enabled in self.feature_flags.items() if enabled)


def parse_version(text: str) -> tuple[int, int, int]:
    """``MAJOR.MINOR.PATCH`` (an optional ``v`` prefix and pre-release/build suffix ignored)."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise BetCodeError(
            ErrorCode.INVALID_REQUEST,
            f"client_version {text!r} is not a version; expected MAJOR.MINOR.PATCH, e.g. 0.1.0",
            {"field": "client_version"},
        )
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def negotiate(
    request: version_pb2.NegotiateRequest, server: ServerCapabilities
) -> version_pb2.NegotiateResponse:
    """Accepts clients at or above MIN_CLIENT_VERSION and grants the requested features the
    server has enabled; everything else becomes a warning, not a failure."""
    if parse_version(request.client_version) < parse_version(MIN_CLIENT_VERSION):
        return version_pb2.NegotiateResponse(
            accepted=False,
            rejection_reason=(
                f"client version {request.client_version} is older than the oldest supported "
                f"client {MIN_CLIENT_VERSION}; upgrade the client"
            ),
        )
    warnings: list[str] = []
    if request.client_type and request.client_type not in GRPC_CLIENT_TYPES:
        known = ", ".join(GRPC_CLIENT_TYPES)
        warnings.append(f"unknown client_type {request.client_type!r} (known: {known})")
    enabled = set(server.features)
    granted = [name for name in request.requested_features if name in enabled]
    for name in request.requested_features:
        if name in server.deprecated_features:
            replacement = server.deprecated_features[name]
            warnings.append(f"feature {name!r} is deprecated; use {replacement!r}")
        elif name not in enabled:
            warnings.append(f"feature {name!r} is not available on this server")
    return version_pb2.NegotiateResponse(
        accepted=True,
        granted_features=granted,
        warnings=warnings,
        capabilities=version_pb2.CapabilitySet(
            streaming_supported=True,
            compression_supported=False,
            max_message_size=server.max_message_bytes,
            available_tools=server.available_tools,
            available_models=server.available_models,
            subagents_enabled=server.subagents_enabled,
            worktrees_enabled=server.worktrees_enabled,
            feature_flags=server.feature_flags,
        ),
    )


class VersionService:
    """betcode.v1.VersionService."""

    def __init__(self, server: ServerCapabilities, claude_code: ClaudeCodeProvider) -> None:
        self._server = server
        self._claude_code = claude_code

    async def GetVersion(
        self, request: version_pb2.GetVersionRequest, context: grpc.aio.ServicerContext
    ) -> version_pb2.GetVersionResponse:
        response = version_pb2.GetVersionResponse(
            api_version=API_VERSION,
            server_version=self._server.server_version,
            features=self._server.features,
            constraints=version_pb2.VersionConstraints(
                min_client_version=MIN_CLIENT_VERSION,
                recommended_client=self._server.server_version,
                deprecated_features=sorted(self._server.deprecated_features),
                feature_replacements=self._server.deprecated_features,
            ),
        )
        claude = self._claude_code()
        if claude is not None:
            response.claude_code.CopyFrom(claude.to_version_info())
        return response

    @handles_errors
    async def NegotiateCapabilities(
        self, request: version_pb2.NegotiateRequest, context: grpc.aio.ServicerContext
    ) -> version_pb2.NegotiateResponse:
        return negotiate(request, self._server)
