"""Protocol adapters: what differs between Claude Code CLI generations, chosen by version.

All generations are read by the same tolerant builders (builders.py accepts both the seed's 1.x
shapes and 2.x). What an adapter adds is the check of a `system/init` for the features a
generation is expected to announce: a missing one marks the stream DEGRADED.
"""

from __future__ import annotations

from dataclasses import dataclass

from betcode.protocol.messages import SystemInit
from betcode.protocol.version import ClaudeVersion


@dataclass(frozen=True, slots=True)
class ProtocolAdapter:
    name: str
    first_version: ClaudeVersion  # the oldest CLI version this adapter serves
    tools_carry_schemas: bool  # init lists tool objects with input_schema (1.x), not names

    def missing_features(self, init: SystemInit) -> list[str]:
        """Features this generation should announce in `init` but did not."""
        missing = []
        if "Bash" not in init.tools:
            missing.append("the Bash tool")
        if self.tools_carry_schemas and init.tools and not init.tool_schemas:
            missing.append("tool input schemas")
        return missing


LEGACY_V1 = ProtocolAdapter(
    name="stream-json 1.x (seed PROTOCOL_L1 shapes)",
    first_version=ClaudeVersion(1, 0, 0),
    tools_carry_schemas=True,
)
STREAM_JSON_V2 = ProtocolAdapter(
    name="stream-json 2.x (verified with Claude Code 2.1.330)",
    first_version=ClaudeVersion(2, 0, 0),
    tools_carry_schemas=False,
)
ADAPTERS = (LEGACY_V1, STREAM_JSON_V2)  # oldest first
NEWEST_ADAPTER = ADAPTERS[-1]


def adapter_for(version: ClaudeVersion | None) -> ProtocolAdapter:
    """The adapter serving `version`; the newest one when the version is unknown."""
    if version is None:
        return NEWEST_ADAPTER
    chosen = ADAPTERS[0]
    for adapter in ADAPTERS:
        if version >= adapter.first_version:
            chosen = adapter
    return chosen
