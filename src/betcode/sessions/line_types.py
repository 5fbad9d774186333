"""The `messages.message_type` of a stored line: claude's top-level NDJSON `type`."""

from __future__ import annotations

from betcode.protocol.messages import (
    AssistantMessage,
    CommandLifecycle,
    ControlCancelRequest,
    ControlRequest,
    ControlResponse,
    ConversationReset,
    KeepAlive,
    Message,
    Result,
    StreamEvent,
    SystemInit,
    SystemMessage,
    Unknown,
    UserMessage,
)

_TYPES: dict[type, str] = {
    SystemInit: "system",
    SystemMessage: "system",
    AssistantMessage: "assistant",
    UserMessage: "user",
    StreamEvent: "stream_event",
    ControlRequest: "control_request",
    ControlCancelRequest: "control_cancel_request",
    ControlResponse: "control_response",
    Result: "result",
    KeepAlive: "keep_alive",
    CommandLifecycle: "command_lifecycle",
    ConversationReset: "conversation_reset",
}

INVALID_LINE = "invalid"  # not JSON / not UTF-8: stored as it came, for the record


def line_type(message: Message | None) -> str:
    if message is None:
        return INVALID_LINE
    if isinstance(message, Unknown):
        return message.type
    return _TYPES.get(type(message), "unknown")
