"""Decoded JSON object (stream-json shape) → canonical message, tolerantly.

Every builder reads through a FieldReader: missing optional fields get defaults, reasonable
alternatives are coerced, and values it had to drop are recorded in the reader's `problems`.
Builders never raise on input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from betcode.protocol.fields import FieldReader
from betcode.protocol.messages import (
    ApiStreamEvent,
    AssistantMessage,
    CanUseTool,
    CommandLifecycle,
    ContentBlock,
    ControlCancelRequest,
    ControlRequest,
    ControlRequestBody,
    ControlResponse,
    ConversationReset,
    Dialect,
    HookCallback,
    KeepAlive,
    McpMessage,
    Message,
    OtherControlRequest,
    PermissionDenial,
    Result,
    StreamApiMessage,
    StreamContentBlock,
    StreamDelta,
    StreamEvent,
    SystemInit,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Unknown,
    UnknownBlock,
    Usage,
    UserMessage,
)

Builder = Callable[[FieldReader, Dialect], Message]


def build_message(fields: FieldReader, dialect: Dialect) -> Message:
    """Build the canonical message for `fields.raw`; an unknown `type` gives `Unknown`."""
    kind = fields.raw.get("type")
    builder = BUILDERS.get(kind) if isinstance(kind, str) else None
    if builder is None:
        return Unknown(kind if isinstance(kind, str) else "", fields.raw)
    return builder(fields, dialect)


def _system(fields: FieldReader, _dialect: Dialect) -> Message:
    subtype = fields.text("subtype")
    if subtype == "init":
        return _system_init(fields)
    return SystemMessage(
        subtype=subtype,
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
        raw=fields.raw,
    )


def _system_init(fields: FieldReader) -> SystemInit:
    names: list[str] = []
    schemas: dict[str, dict[str, Any]] = {}
    for tool in fields.items("tools"):
        # 2.1.x lists names; the seed (1.x) and the Dart SDK list {name, description, input_schema}.
        if isinstance(tool, str):
            names.append(tool)
            continue
        tool_fields = FieldReader(tool, "$.tools[]", fields.problems)
        name = tool_fields.opt_text("name")
        if not name:
            continue
        names.append(name)
        schema = tool_fields.opt_obj("input_schema")
        if schema is not None:
            schemas[name] = schema
    return SystemInit(
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
        cwd=fields.text("cwd"),
        model=fields.text("model"),
        permission_mode=fields.text("permissionMode"),
        tools=names,
        tool_schemas=schemas,
        mcp_servers=fields.objects("mcp_servers"),
        slash_commands=fields.texts("slash_commands"),
        agents=fields.texts("agents"),
        capabilities=fields.texts("capabilities"),
        claude_code_version=fields.opt_text("claude_code_version"),
        api_version=fields.opt_text("api_version"),
        api_key_source=fields.opt_text("apiKeySource"),
        output_style=fields.opt_text("output_style"),
        user_message_uuids=fields.texts("user_message_uuids"),
    )


def _assistant(fields: FieldReader, _dialect: Dialect) -> AssistantMessage:
    message = fields.child("message")
    return AssistantMessage(
        content=_content_blocks(message),
        message_id=message.text("id"),
        model=message.text("model"),
        stop_reason=message.opt_text("stop_reason"),
        usage=_usage(message.child("usage")),
        parent_tool_use_id=fields.opt_text("parent_tool_use_id"),
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
        request_id=fields.opt_text("request_id"),
        is_api_error=fields.flag("is_api_error_message"),
        api_error_status=fields.opt_integer("api_error_status"),
        error=fields.opt_text("error"),
        aborted=fields.flag("aborted"),
        agent_id=fields.opt_text("agent_id"),
    )


def _user(fields: FieldReader, _dialect: Dialect) -> UserMessage:
    return UserMessage(
        content=_content_blocks(fields.child("message")),
        is_replay=fields.flag("isReplay"),
        is_synthetic=fields.flag("isSynthetic"),
        parent_tool_use_id=fields.opt_text("parent_tool_use_id"),
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
        tool_use_result=fields.raw.get("tool_use_result"),
    )


def _content_blocks(message: FieldReader) -> list[ContentBlock]:
    content = message.raw.get("content")
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return [_content_block(block) for block in message.each("content")]


def _content_block(block: FieldReader) -> ContentBlock:
    kind = block.text("type")
    if kind == "text":
        return TextBlock(text=block.text("text"))
    if kind == "tool_use":
        return ToolUseBlock(id=block.text("id"), name=block.text("name"), input=block.obj("input"))
    if kind == "thinking":
        return ThinkingBlock(thinking=block.text("thinking"), signature=block.text("signature"))
    if kind == "tool_result":
        return ToolResultBlock(
            tool_use_id=block.text("tool_use_id"),
            content=_tool_result_text(block.raw.get("content")),
            is_error=block.flag("is_error"),
        )
    return UnknownBlock(type=kind, raw=block.raw)


def _tool_result_text(content: object) -> str:
    """A tool result's text: a string as is, the text parts of a block list joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return "\n".join(texts)
    return ""


def _usage(usage: FieldReader) -> Usage:
    return Usage(
        input_tokens=usage.integer("input_tokens"),
        output_tokens=usage.integer("output_tokens"),
        cache_read_input_tokens=usage.integer("cache_read_input_tokens"),
        cache_creation_input_tokens=usage.integer("cache_creation_input_tokens"),
    )


def _stream_event(fields: FieldReader, _dialect: Dialect) -> StreamEvent:
    """The tolerant path for stream_event lines the typed fast path (reader.py) rejected."""
    event = fields.child("event")
    delta = event.child("delta") if event.has("delta") else None
    block = event.child("content_block") if event.has("content_block") else None
    api_message = event.child("message") if event.has("message") else None
    return StreamEvent(
        event=ApiStreamEvent(
            type=event.text("type"),
            index=event.opt_integer("index"),
            delta=None if delta is None else _stream_delta(delta),
            content_block=(
                None
                if block is None
                else StreamContentBlock(
                    type=block.text("type"), id=block.opt_text("id"), name=block.opt_text("name")
                )
            ),
            message=(
                None
                if api_message is None
                else StreamApiMessage(
                    id=api_message.opt_text("id"), model=api_message.opt_text("model")
                )
            ),
            usage=_usage(event.child("usage")) if event.has("usage") else None,
        ),
        session_id=fields.text("session_id"),
        parent_tool_use_id=fields.opt_text("parent_tool_use_id"),
        uuid=fields.text("uuid"),
        api_message_id=fields.opt_text("api_message_id"),
    )


def _stream_delta(delta: FieldReader) -> StreamDelta:
    return StreamDelta(
        type=delta.text("type"),
        text=delta.opt_text("text"),
        partial_json=delta.opt_text("partial_json"),
        thinking=delta.opt_text("thinking"),
        signature=delta.opt_text("signature"),
        stop_reason=delta.opt_text("stop_reason"),
    )


def _control_request(fields: FieldReader, dialect: Dialect) -> Message:
    request_id = fields.text("request_id")
    if not request_id:
        fields.problems.append("$.request_id: missing, so the request cannot be answered")
        return Unknown("control_request", fields.raw)
    return ControlRequest(
        request_id=request_id,
        request=_control_request_body(fields.child("request")),
        dialect=dialect,
    )


def _control_request_body(request: FieldReader) -> ControlRequestBody:
    subtype = request.text("subtype")
    if subtype == "can_use_tool":
        return CanUseTool(
            tool_name=request.text("tool_name"),
            input=request.obj("input"),
            tool_use_id=request.opt_text("tool_use_id"),
            display_name=request.opt_text("display_name"),
            description=request.opt_text("description"),
            permission_suggestions=request.objects("permission_suggestions"),
            decision_reason=request.opt_text("decision_reason"),
            decision_reason_type=request.opt_text("decision_reason_type"),
            blocked_path=request.opt_text("blocked_path"),
            requires_user_interaction=request.flag("requires_user_interaction"),
            agent_id=request.opt_text("agent_id"),
        )
    if subtype == "hook_callback":
        return HookCallback(
            callback_id=request.text("callback_id"),
            input=request.obj("input"),
            tool_use_id=request.opt_text("tool_use_id"),
        )
    if subtype == "mcp_message":
        return McpMessage(server_name=request.text("server_name"), message=request.obj("message"))
    return OtherControlRequest(subtype=subtype, raw=request.raw)


def _control_cancel_request(fields: FieldReader, _dialect: Dialect) -> ControlCancelRequest:
    return ControlCancelRequest(request_id=fields.text("request_id"))


def _control_response(fields: FieldReader, _dialect: Dialect) -> ControlResponse:
    response = fields.child("response")
    return ControlResponse(
        request_id=response.text("request_id"),
        subtype=response.text("subtype", "success"),
        response=response.opt_obj("response"),
        error=response.opt_text("error"),
        error_code=response.opt_text("error_code"),
    )


def _result(fields: FieldReader, _dialect: Dialect) -> Result:
    subtype = fields.text("subtype", "success")
    errors = fields.texts("errors")
    legacy_error = fields.raw.get(
        "error"
    )  # the seed's error variant: {"subtype":"error","error":"…"}
    if not errors and isinstance(legacy_error, str):
        errors = [legacy_error]
    uuids = fields.texts("user_message_uuids")
    if not uuids and fields.has("user_message_uuid"):
        uuids = [fields.text("user_message_uuid")]
    return Result(
        subtype=subtype,
        is_error=fields.flag("is_error", default=subtype != "success"),
        result=fields.opt_text("result"),
        errors=errors,
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
        duration_ms=fields.integer("duration_ms"),
        duration_api_ms=fields.integer("duration_api_ms"),
        num_turns=fields.integer("num_turns"),
        stop_reason=fields.opt_text("stop_reason"),
        terminal_reason=fields.opt_text("terminal_reason"),
        total_cost_usd=fields.opt_number("total_cost_usd"),
        usage=_usage(fields.child("usage")),
        model_usage=_usage_by_model(fields, "modelUsage"),
        model_usage_since_last_result=_usage_by_model(fields, "model_usage_since_last_result"),
        permission_denials=[_permission_denial(d) for d in fields.each("permission_denials")],
        api_error_status=fields.opt_integer("api_error_status"),
        result_index=fields.opt_integer("result_index"),
        user_message_uuids=uuids,
        local_command=fields.opt_text("local_command"),
        origin_kind=fields.child("origin").opt_text("kind"),
    )


def _usage_by_model(fields: FieldReader, key: str) -> dict[str, dict[str, Any]]:
    by_model = fields.obj(key)
    return {model: usage for model, usage in by_model.items() if isinstance(usage, dict)}


def _permission_denial(denial: FieldReader) -> PermissionDenial:
    return PermissionDenial(
        tool_name=denial.text("tool_name"),
        tool_use_id=denial.text("tool_use_id"),
        tool_input=denial.obj("tool_input"),
    )


def _keep_alive(_fields: FieldReader, _dialect: Dialect) -> KeepAlive:
    return KeepAlive()


def _command_lifecycle(fields: FieldReader, _dialect: Dialect) -> CommandLifecycle:
    return CommandLifecycle(
        command_uuid=fields.text("command_uuid"),
        state=fields.text("state"),
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
    )


def _conversation_reset(fields: FieldReader, _dialect: Dialect) -> ConversationReset:
    return ConversationReset(
        new_conversation_id=fields.text("new_conversation_id"),
        trigger=fields.text("trigger"),
        session_id=fields.text("session_id"),
        uuid=fields.text("uuid"),
    )


BUILDERS: dict[str, Builder] = {
    "system": _system,
    "assistant": _assistant,
    "user": _user,
    "stream_event": _stream_event,
    "control_request": _control_request,
    "control_cancel_request": _control_cancel_request,
    "control_response": _control_response,
    "result": _result,
    "keep_alive": _keep_alive,
    "command_lifecycle": _command_lifecycle,
    "conversation_reset": _conversation_reset,
}
