"""What the mock model does for one Messages API request: the reply plan.

A scenario step returns a `Reply`; the server turns it into an HTTP answer (SSE stream,
JSON message, or API error) and applies its timing (delays, stalls).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextBlock:
    """An assistant text content block."""

    text: str


@dataclass(frozen=True)
class ToolUseBlock:
    """An assistant tool_use content block; `id` is assigned by the server when None."""

    name: str
    input: Mapping[str, Any]
    id: str | None = None


Block = TextBlock | ToolUseBlock


@dataclass(frozen=True)
class Reply:
    """One answer of the mock model.

    `http_status` set: the request fails with that API error (no message at all).
    `error_after_deltas` set: a streaming answer breaks off with an SSE `error` event after
    that many content deltas (non-streaming requests get the whole message).
    `stall_before_s`: silence before the first byte. `stall_after_deltas` + `stall_s`: silence
    in the middle of the stream. Stalls end early when the mock is stopped or released, or
    when the client hangs up.
    `delta_delay_s`: pause after every content delta (None: the server's default).
    `error_message`: the message of the API error (HTTP or SSE).
    """

    blocks: tuple[Block, ...] = ()
    http_status: int | None = None
    error_after_deltas: int | None = None
    stall_before_s: float = 0.0
    stall_after_deltas: int | None = None
    stall_s: float = 0.0
    delta_delay_s: float | None = None
    error_message: str = ""

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolUseBlock) for b in self.blocks) else "end_turn"


def text_reply(text: str, **options: Any) -> Reply:
    """A reply made of one text block."""
    return Reply(blocks=(TextBlock(text),), **options)
