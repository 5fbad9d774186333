"""What the daemon knows about its claude CLI, as health details and version info show it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from betcode.v1 import health_pb2, version_pb2


@dataclass(frozen=True, slots=True)
class ClaudeCodeReport:
    binary_path: str
    binary_source: str  # flag | env | path | pinned
    version: str
    api_version: str
    compatibility: version_pb2.CompatibilityLevel.ValueType
    message: str = ""

    def to_health_status(self) -> health_pb2.ClaudeCodeStatus:
        return health_pb2.ClaudeCodeStatus(
            binary_path=self.binary_path,
            binary_source=self.binary_source,
            version=self.version,
            compatibility=self.compatibility,
            message=self.message,
        )

    def to_version_info(self) -> version_pb2.ClaudeCodeInfo:
        return version_pb2.ClaudeCodeInfo(
            version=self.version, api_version=self.api_version, compatibility=self.compatibility
        )


# Called on every request, so it must be cheap (the daemon caches its startup version check).
# None = not known yet.
ClaudeCodeProvider = Callable[[], ClaudeCodeReport | None]
