"""A short, stable name for each canonical message (`ndjson inspect`, logs, metrics), and the
top-level `type` of the line it came from (what the `messages` table stores).

Kinds: system_init, system (with subtype), assistant, user, stream_event, control_request (with
subtype), control_cancel_request, control_response, result (with subtype and is_error),
keep_alive, unknown (with type). `command_lifecycle` and `conversation_reset` are CLI
notifications like the system subtypes, so they are kind `system` with that subtype.
"""

from __future__ import annotations

from typing import Any

from betcode.protocol.messages import (
    AssistantMessage,
    CanUseTool,
    CommandLifecycle,
    ContentBlock,
    ControlCancelRequest,
    ControlRequest,
    ControlResponse,
    ConversationReset,
    Dialect,
    KeepAlive,
    Message,
    Result,
    StreamEvent,
    SystemInit,
    SystemMessage,
    Unknown,
    UnknownBlock,
    UserMessage,
)

# claude's top-level `type` of the line each message is read from (in the stream-json dialect).
_WIRE_TYPE: dict[type, str] = {
    SystemInit: "system",
    SystemMessage: "system",
    CommandLifecycle: "command_lifecycle",
    ConversationReset: "conversation_reset",
    AssistantMessage: "assistant",
    UserMessage: "user",
    StreamEvent: "stream_event",
    ControlRequest: "control_request",
    ControlCancelRequest: "control_cancel_request",
    ControlResponse: "control_response",
    Result: "result",
    KeepAlive: "keep_alive",
}


def wire_type(message: Message) -> str:
    """The top-level NDJSON `type` of the message's line (an unknown one's own type)."""
    if isinstance(message, Unknown):
        return message.type
    return _WIRE_TYPE.get(type(message), "unknown")


def message_kind(message: Message) -> str:
    match message:
        case SystemInit():
            return "system_init"
        case CommandLifecycle() | ConversationReset():
            return "system"
        case Unknown():
            return "unknown"
    return wire_type(message)


def describe(message: Message) -> dict[str, Any]:
    """`{"kind": …}` plus the fields that tell messages of that kind apart."""
    description: dict[str, Any] = {"kind": message_kind(message)}
    match message:
        case SystemInit():
            description |= {"session_id": message.session_id, "model": message.model}
            description["tools"] = len(message.tools)
        case SystemMessage():
            description["subtype"] = message.subtype
        case CommandLifecycle():
            description |= {"subtype": "command_lifecycle", "state": message.state}
        case ConversationReset():
            description |= {
                "subtype": "conversation_reset",
                "new_session_id": message.new_conversation_id,
            }
        case AssistantMessage() | UserMessage():
            description["blocks"] = [_block_label(block) for block in message.content]
        case StreamEvent():
            description["event"] = message.event_type
            if message.delta_type:
                description["delta"] = message.delta_type
        case ControlRequest():
            description |= {"subtype": message.subtype, "request_id": message.request_id}
            if isinstance(message.request, CanUseTool):
                description["tool_name"] = message.request.tool_name
            if message.dialect != Dialect.STREAM_JSON:
                description["dialect"] = str(message.dialect)
        case ControlCancelRequest() | ControlResponse():
            description["request_id"] = message.request_id
        case Result():
            description |= {"subtype": message.subtype, "is_error": message.is_error}
            description["num_turns"] = message.num_turns
        case Unknown():
            description["type"] = message.type
    return description


def _block_label(block: ContentBlock) -> str:
    if isinstance(block, UnknownBlock):
        return block.type
    return str(block.__struct_config__.tag)
