"""Canonical messages: what claude's stdout lines mean, independent of CLI version and dialect.

Field meanings follow docs/PROTOCOL.md#messages-read (the real CLI 2.1.330). All types are frozen
msgspec Structs. `StreamEvent` keeps the wire's nesting so the hot path can decode straight into it;
its
properties give the flat view (`text`, `delta_type`, `block_id`, …). The other types are built by
the tolerant reader (builders.py), which fills every missing optional field with its default.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, TypeAlias

import msgspec


class Dialect(enum.StrEnum):
    """The JSON-lines dialect a message came in; replies go back in the same one."""

    STREAM_JSON = "stream_json"  # Claude Code's own: control_request / control_response
    DART_SDK = "dart_sdk"  # callback.request / callback.response, session.created


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts (per turn in `Result`, per API message in `AssistantMessage`)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


# Content blocks. Tagged by "type" so that they encode back to their wire shape.


class TextBlock(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str = ""


class ToolUseBlock(msgspec.Struct, frozen=True, tag="tool_use", tag_field="type"):
    id: str = ""
    name: str = ""
    input: dict[str, Any] = {}


class ThinkingBlock(msgspec.Struct, frozen=True, tag="thinking", tag_field="type"):
    thinking: str = ""
    signature: str = ""


class ToolResultBlock(msgspec.Struct, frozen=True, tag="tool_result", tag_field="type"):
    """A tool's result as the model sees it; `content` is its text (list content is joined)."""

    tool_use_id: str = ""
    content: str = ""
    is_error: bool = False


class UnknownBlock(msgspec.Struct, frozen=True):
    """A content block of a type this codec does not model (image, tool_reference, …)."""

    type: str
    raw: dict[str, Any]


ContentBlock: TypeAlias = TextBlock | ToolUseBlock | ThinkingBlock | ToolResultBlock | UnknownBlock


# system


class SystemInit(msgspec.Struct, frozen=True, kw_only=True):
    """`system/init`: sent at the start of every turn (2.1.x), with the values at that turn."""

    session_id: str = ""
    uuid: str = ""
    cwd: str = ""
    model: str = ""
    permission_mode: str = ""
    tools: list[str] = []
    # Input schemas by tool name, when tools come as objects (seed/1.x shape); 2.1.x sends names.
    tool_schemas: dict[str, dict[str, Any]] = {}
    mcp_servers: list[dict[str, Any]] = []
    slash_commands: list[str] = []
    agents: list[str] = []
    capabilities: list[str] = []
    claude_code_version: str | None = None
    api_version: str | None = None
    api_key_source: str | None = None
    output_style: str | None = None
    user_message_uuids: list[str] = []


class SystemMessage(msgspec.Struct, frozen=True, kw_only=True):
    """Any other `system` subtype (status, api_retry, compact_boundary, task_*, …).

    `raw` is the whole object as received. The Dart SDK dialect's `session.created` and `error`
    arrive here as subtypes `session_created` and `error`.
    """

    subtype: str
    session_id: str = ""
    uuid: str = ""
    raw: dict[str, Any] = {}


# assistant / user


class AssistantMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One `assistant` line: in 2.1.x one content block per line, several lines per API message
    (same `message_id`). `stop_reason` is null there and `usage` is the message_start usage."""

    content: list[ContentBlock] = []
    message_id: str = ""
    model: str = ""
    stop_reason: str | None = None
    usage: Usage = Usage()
    parent_tool_use_id: str | None = None
    session_id: str = ""
    uuid: str = ""
    request_id: str | None = None
    is_api_error: bool = False  # a synthetic message (model "<synthetic>") reporting an API error
    api_error_status: int | None = None
    error: str | None = None  # unknown | server_error | max_output_tokens
    aborted: bool = False  # the partial message flushed by an interrupt
    agent_id: str | None = None  # set on a subagent's output


class UserMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A `user` line: the CLI's echo of tool results, interrupt markers, replays, synthetic text.

    String content is given as one `TextBlock`. `tool_use_result` is the tool's structured output
    (a dict) or an error string.
    """

    content: list[ContentBlock] = []
    is_replay: bool = False
    is_synthetic: bool = False
    parent_tool_use_id: str | None = None
    session_id: str = ""
    uuid: str = ""
    tool_use_result: Any = None


# stream_event (decoded straight from the wire on the hot path)


class StreamDelta(msgspec.Struct, frozen=True, gc=False):
    type: str = ""  # text_delta | input_json_delta | thinking_delta | signature_delta | ""
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None  # message_delta


class StreamContentBlock(msgspec.Struct, frozen=True, gc=False):
    type: str = ""
    id: str | None = None
    name: str | None = None


class StreamApiMessage(msgspec.Struct, frozen=True, gc=False):
    id: str | None = None
    model: str | None = None


class ApiStreamEvent(msgspec.Struct, frozen=True, gc=False):
    """The raw Anthropic SSE event inside a `stream_event` line."""

    type: str = ""
    index: int | None = None
    delta: StreamDelta | None = None
    content_block: StreamContentBlock | None = None
    message: StreamApiMessage | None = None
    usage: Usage | None = None


class StreamEvent(msgspec.Struct, frozen=True, gc=False, tag="stream_event", tag_field="type"):
    """A `stream_event` (only with --include-partial-messages)."""

    event: ApiStreamEvent = ApiStreamEvent()
    session_id: str = ""
    parent_tool_use_id: str | None = None
    uuid: str = ""
    api_message_id: str | None = None

    @property
    def event_type(self) -> str:
        return self.event.type

    @property
    def index(self) -> int | None:
        return self.event.index

    @property
    def delta_type(self) -> str | None:
        delta = self.event.delta
        return None if delta is None else delta.type

    @property
    def text(self) -> str | None:
        delta = self.event.delta
        return None if delta is None else delta.text

    @property
    def partial_json(self) -> str | None:
        delta = self.event.delta
        return None if delta is None else delta.partial_json

    @property
    def thinking(self) -> str | None:
        delta = self.event.delta
        return None if delta is None else delta.thinking

    @property
    def block_type(self) -> str | None:
        block = self.event.content_block
        return None if block is None else block.type

    @property
    def block_id(self) -> str | None:
        block = self.event.content_block
        return None if block is None else block.id

    @property
    def block_name(self) -> str | None:
        block = self.event.content_block
        return None if block is None else block.name

    @property
    def message_id(self) -> str | None:
        """The API message id: from message_start, else the envelope's api_message_id."""
        message = self.event.message
        if message is not None and message.id is not None:
            return message.id
        return self.api_message_id


# control requests (CLI → daemon)


class CanUseTool(msgspec.Struct, frozen=True, kw_only=True):
    """A permission request. AskUserQuestion and ExitPlanMode set requires_user_interaction."""

    subtype: ClassVar[str] = "can_use_tool"
    tool_name: str = ""
    input: dict[str, Any] = {}
    tool_use_id: str | None = None
    display_name: str | None = None
    description: str | None = None
    permission_suggestions: list[dict[str, Any]] = []
    decision_reason: str | None = None
    decision_reason_type: str | None = None  # other | workingDir | mode
    blocked_path: str | None = None
    requires_user_interaction: bool = False
    agent_id: str | None = None


class HookCallback(msgspec.Struct, frozen=True, kw_only=True):
    subtype: ClassVar[str] = "hook_callback"
    callback_id: str = ""
    input: dict[str, Any] = {}
    tool_use_id: str | None = None


class McpMessage(msgspec.Struct, frozen=True, kw_only=True):
    subtype: ClassVar[str] = "mcp_message"
    server_name: str = ""
    message: dict[str, Any] = {}


class OtherControlRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A control request subtype this codec does not model; `raw` is the request object."""

    subtype: str
    raw: dict[str, Any] = {}


ControlRequestBody: TypeAlias = CanUseTool | HookCallback | McpMessage | OtherControlRequest


class ControlRequest(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    request: ControlRequestBody
    dialect: Dialect = Dialect.STREAM_JSON

    @property
    def subtype(self) -> str:
        return self.request.subtype


class ControlCancelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The CLI withdrew a pending request (an interrupt landed); later answers are ignored."""

    request_id: str = ""


class ControlResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The CLI's answer to one of our control requests."""

    request_id: str = ""  # empty when the request had none
    subtype: str = "success"  # success | error
    response: dict[str, Any] | None = None
    error: str | None = None
    error_code: str | None = None

    @property
    def is_error(self) -> bool:
        return self.subtype == "error"


# result


class PermissionDenial(msgspec.Struct, frozen=True, kw_only=True):
    tool_name: str = ""
    tool_use_id: str = ""
    tool_input: dict[str, Any] = {}


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """The end of a turn.

    `total_cost_usd` and `model_usage` are CUMULATIVE for the process (restored on --resume);
    `usage` and `model_usage_since_last_result` cover THIS turn only. API failures come as
    subtype "success" with is_error true; only "success" has `result`, error subtypes have
    `errors`.
    """

    subtype: str = "success"
    is_error: bool = False
    result: str | None = None
    errors: list[str] = []
    session_id: str = ""
    uuid: str = ""
    duration_ms: int = 0
    duration_api_ms: int = 0
    num_turns: int = 0
    stop_reason: str | None = None
    terminal_reason: str | None = None
    total_cost_usd: float | None = None
    usage: Usage = Usage()
    model_usage: dict[str, dict[str, Any]] = {}
    model_usage_since_last_result: dict[str, dict[str, Any]] = {}
    permission_denials: list[PermissionDenial] = []
    api_error_status: int | None = None
    result_index: int | None = None
    user_message_uuids: list[str] = []
    local_command: str | None = None
    origin_kind: str | None = None  # "task-notification" for turns the CLI started itself


# other top-level types


class KeepAlive(msgspec.Struct, frozen=True):
    pass


class CommandLifecycle(msgspec.Struct, frozen=True, kw_only=True):
    """Progress of a uuid-stamped input message: queued → started → completed."""

    command_uuid: str = ""
    state: str = ""
    session_id: str = ""
    uuid: str = ""


class ConversationReset(msgspec.Struct, frozen=True, kw_only=True):
    """/clear: every later message carries `new_conversation_id` as its session_id."""

    new_conversation_id: str = ""
    trigger: str = ""
    session_id: str = ""  # the old id
    uuid: str = ""


class Unknown(msgspec.Struct, frozen=True):
    """A line of a type this codec does not know, kept whole."""

    type: str
    raw: dict[str, Any]


Message: TypeAlias = (
    SystemInit
    | SystemMessage
    | AssistantMessage
    | UserMessage
    | StreamEvent
    | ControlRequest
    | ControlCancelRequest
    | ControlResponse
    | Result
    | KeepAlive
    | CommandLifecycle
    | ConversationReset
    | Unknown
)
