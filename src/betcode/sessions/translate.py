"""Canonical Layer-1 messages → betcode.v1 AgentEvents (docs/PROTOCOL.md#messages-read).

One `Translator` per session holds what must survive across lines: open stream blocks and their
input_json fragments, which tool calls were already announced, which API messages streamed text,
the last status, the permission mode, the cost baseline. `translate` is otherwise a pure function
of the message; it never does I/O and never raises on odd input.

Decisions worth knowing:

* A tool call is announced once per tool_use id, by whichever comes first: the `assistant` line
  (with partial messages the CLI emits it just BEFORE the block's content_block_stop, and its
  input is authoritative — the CLI rewrites some inputs) or the block's content_block_stop (input
  rebuilt from input_json_delta fragments).
* An `assistant` text block becomes one complete TextDelta only when its API message streamed no
  text (partial messages off, the CLI's non-streamed retry after a mid-stream error, synthetic
  API-error messages); otherwise the deltas already carried it.
* `system/init` comes at the start of EVERY turn in 2.1.x; SessionInfo is emitted for the first
  init of each claude process and when the model or working directory changes, not every turn.
* `user` lines other than tool results (interrupt markers, replays of local-command output,
  synthetic nudges) produce nothing: the session records the user's own input as UserInput when
  it writes it to claude's stdin, and TurnComplete("cancelled") tells of an interrupt.
* `can_use_tool` is not translated here: the permission layer decides whether to forward it and
  then builds the event with event_builders (`parent_tool_use_id_of` gives its parent).
* Status changes come only from top-level output (a subagent's stream does not make the session
  THINKING while its Task tool runs) and only when the status changes. Code outside the
  translator that changes the status (waiting for a permission, restarting) goes through
  `set_status` so that this stays true.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from betcode.protocol.messages import (
    AssistantMessage,
    ControlRequest,
    ConversationReset,
    Message,
    StreamEvent,
    SystemInit,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from betcode.protocol.messages import Result as ResultMessage
from betcode.sessions import event_builders as build
from betcode.sessions.event_builders import (
    AgentEvent,
    AgentStatus,
    error_event,
    input_lock_event,
    input_lock_requested_event,
    kind_of,
    permission_reminder_event,
    permission_request_event,
    permission_resolved_event,
    status_event,
    user_input_event,
    user_question_event,
)
from betcode.sessions.turn_usage import CostBaseline, TurnUsage, turn_usage
from betcode.v1 import agent_pb2, common_pb2

# The builders the session and the permission layer call are re-exported here, so that one
# module is the whole translation surface.
__all__ = [
    "AgentEvent",
    "AgentStatus",
    "Translator",
    "TurnUsage",
    "error_event",
    "input_lock_event",
    "input_lock_requested_event",
    "kind_of",
    "permission_reminder_event",
    "permission_request_event",
    "permission_resolved_event",
    "status_event",
    "user_input_event",
    "user_question_event",
]

THINKING = common_pb2.AGENT_STATUS_THINKING
EXECUTING_TOOL = common_pb2.AGENT_STATUS_EXECUTING_TOOL
IDLE = common_pb2.AGENT_STATUS_IDLE
COMPACTING = common_pb2.AGENT_STATUS_COMPACTING

# Ids are remembered for de-duplication only as long as they can still recur; the caps bound
# memory in a long session (a message's stream and assistant lines arrive close together).
_RECENT_CAP = 4096


@dataclass(slots=True)
class _OpenBlock:
    kind: str  # content block type: text | tool_use | thinking | …
    tool_id: str = ""
    tool_name: str = ""
    json_parts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _ToolCall:
    parent_tool_use_id: str
    started_at: float | None = None  # clock reading at ToolCallStart; None until announced


class Translator:
    """Stateful per-session translation; see the module docstring for the rules."""

    def __init__(
        self,
        session_id: str,
        *,
        worktree_id: str = "",
        is_resumed: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session_id = session_id
        self._worktree_id = worktree_id
        self._is_resumed = is_resumed
        self._clock = clock
        self._claude_session_id: str | None = None
        self._tools: tuple[str, ...] = ()
        self._model = ""
        self._announced_info: tuple[str, str] | None = None  # (model, cwd) of the last SessionInfo
        self._status: tuple[AgentStatus, str] = (common_pb2.AGENT_STATUS_UNSPECIFIED, "")
        self._permission_mode: str | None = None
        self._pending_plan = ""  # the plan of the latest ExitPlanMode call, for PlanModeChange
        self._blocks: dict[tuple[str, int], _OpenBlock] = {}
        self._current_message: dict[str, str] = {}  # parent_tool_use_id → streaming message id
        self._streamed_messages: dict[str, None] = {}  # ids of API messages that streamed text
        self._tool_calls: dict[str, _ToolCall] = {}
        self._running_top_level: set[str] = set()
        self._cancel_requested = False
        self._cost = CostBaseline.for_process(resumed=is_resumed)
        self._last_usage: TurnUsage | None = None

    # ---- what the session reads

    @property
    def claude_session_id(self) -> str | None:
        """Claude's own session id (for --resume); follows /clear's conversation_reset."""
        return self._claude_session_id

    @property
    def tools(self) -> tuple[str, ...]:
        return self._tools

    @property
    def status(self) -> AgentStatus:
        return self._status[0]

    @property
    def permission_mode(self) -> str | None:
        return self._permission_mode

    @property
    def last_usage(self) -> TurnUsage | None:
        """Usage, cost, stop reason and error of the last `result`, for the session's totals."""
        return self._last_usage

    def parent_tool_use_id_of(self, tool_use_id: str | None) -> str:
        """The subagent (Task tool_use id) a tool call runs in, "" for top level or unknown."""
        call = self._tool_calls.get(tool_use_id or "")
        return "" if call is None else call.parent_tool_use_id

    # ---- what the session tells

    def tool_unfinished(self, tool_use_id: str) -> bool:
        """Whether a tool call claude announced has not yet produced its result."""
        return tool_use_id in self._tool_calls

    def set_status(self, status: AgentStatus, message: str = "") -> list[AgentEvent]:
        """A StatusChange if the status (or its message) differs from the last one, else []."""
        if self._status == (status, message):
            return []
        self._status = (status, message)
        return [build.status_event(status, message)]

    def mark_cancel_requested(self) -> None:
        """An interrupt was sent for the running turn: its TurnComplete says "cancelled"."""
        self._cancel_requested = True

    def process_restarted(self, *, resumed: bool = True) -> None:
        """A new claude process serves the session: forget per-process stream state, announce
        SessionInfo again, and stop trusting the cumulative cost (--resume restores it)."""
        self._blocks.clear()
        self._current_message.clear()
        self._running_top_level.clear()
        self._announced_info = None
        self._cancel_requested = False
        self._is_resumed = self._is_resumed or resumed
        self._cost = CostBaseline.for_process(resumed=resumed)

    def recall(self, earlier: Iterable[Message], status: tuple[AgentStatus, str] | None) -> None:
        """A daemon restarted and re-attached this claude: the lines it printed since its
        turn began, already translated, stored and sent by the last daemon, are translated
        again with their events dropped, so that the open blocks, what each message streamed,
        the tool calls announced and the cost baseline are as that daemon left them; `status`
        is the last one it set. The lines the holder sends again continue from there."""
        for message in earlier:
            if isinstance(message, ControlRequest):  # translated to nothing: only an
                if message.subtype == "interrupt":  # interrupt the daemon wrote counts
                    self.mark_cancel_requested()
            else:
                self.translate(message)
        if status is not None:
            self._status = status

    # ---- translation

    def translate(self, message: Message) -> list[AgentEvent]:
        match message:
            case StreamEvent():
                return self._stream_event(message)
            case AssistantMessage():
                return self._assistant(message)
            case UserMessage():
                return self._user(message)
            case SystemInit():
                return self._system_init(message)
            case SystemMessage():
                return self._system_message(message)
            case ResultMessage():
                return self._result(message)
            case ConversationReset():
                self._claude_session_id = message.new_conversation_id or self._claude_session_id
                return []
            case _:
                # Control requests/responses/cancels belong to the session and permission layer;
                # keep-alives, command lifecycle and unknown lines carry nothing for clients.
                return []

    def _stream_event(self, message: StreamEvent) -> list[AgentEvent]:
        parent = message.parent_tool_use_id or ""
        event = message.event
        kind = event.type
        if kind == "content_block_delta":
            return self._block_delta(message, parent)
        if kind == "content_block_start":
            return self._block_start(message, parent)
        if kind == "content_block_stop":
            block = self._blocks.pop((parent, event.index or 0), None)
            return [] if block is None else self._block_stop(block, parent)
        if kind == "message_start":
            message_id = message.message_id
            if message_id:
                self._current_message[parent] = message_id
            return [] if parent else self.set_status(THINKING)
        return []

    def _block_start(self, message: StreamEvent, parent: str) -> list[AgentEvent]:
        block = _OpenBlock(kind=message.block_type or "")
        if block.kind == "tool_use":
            block.tool_id = message.block_id or ""
            block.tool_name = message.block_name or ""
            # Known before the assistant line: a can_use_tool can arrive in between.
            self._tool_calls.setdefault(block.tool_id, _ToolCall(parent))
            _trim(self._tool_calls)
        self._blocks[(parent, message.index or 0)] = block
        return []

    def _block_delta(self, message: StreamEvent, parent: str) -> list[AgentEvent]:
        delta = message.event.delta
        if delta is None:
            return []
        if delta.type == "text_delta":
            message_id = message.api_message_id or self._current_message.get(parent)
            if message_id:
                self._streamed_messages[message_id] = None
                _trim(self._streamed_messages)
            return [build.text_delta_event(delta.text or "", parent_tool_use_id=parent)]
        if delta.type == "input_json_delta":
            block = self._blocks.get((parent, message.index or 0))
            if block is not None and delta.partial_json:
                block.json_parts.append(delta.partial_json)
        return []

    def _block_stop(self, block: _OpenBlock, parent: str) -> list[AgentEvent]:
        if block.kind == "text":
            return [build.text_delta_event("", is_complete=True, parent_tool_use_id=parent)]
        if block.kind == "tool_use":
            return self._announce_tool(
                block.tool_id,
                block.tool_name,
                build.rebuild_input("".join(block.json_parts)),
                parent,
            )
        return []

    def _assistant(self, message: AssistantMessage) -> list[AgentEvent]:
        parent = message.parent_tool_use_id or ""
        events: list[AgentEvent] = []
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                events += self._announce_tool(block.id, block.name, block.input, parent)
            elif (
                isinstance(block, TextBlock)
                and block.text
                and message.message_id not in self._streamed_messages
            ):
                events.append(
                    build.text_delta_event(block.text, is_complete=True, parent_tool_use_id=parent)
                )
        return events

    def _announce_tool(
        self, tool_id: str, name: str, tool_input: dict[str, Any], parent: str
    ) -> list[AgentEvent]:
        call = self._tool_calls.setdefault(tool_id, _ToolCall(parent))
        _trim(self._tool_calls)
        if call.started_at is not None:
            return []
        call.started_at = self._clock()
        if name == "ExitPlanMode" and isinstance(tool_input.get("plan"), str):
            self._pending_plan = tool_input["plan"]
        events = [build.tool_call_start_event(tool_id, name, tool_input, parent_tool_use_id=parent)]
        if not parent:
            self._running_top_level.add(tool_id)
            events += self.set_status(EXECUTING_TOOL)
        return events

    def _user(self, message: UserMessage) -> list[AgentEvent]:
        parent = message.parent_tool_use_id or ""
        events: list[AgentEvent] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                events.append(self._tool_result(block, parent))
        if events and not parent and not self._running_top_level:
            events += self.set_status(THINKING)
        return events

    def _tool_result(self, block: ToolResultBlock, parent: str) -> AgentEvent:
        call = self._tool_calls.pop(block.tool_use_id, None)
        self._running_top_level.discard(block.tool_use_id)
        duration_ms = 0
        if call is not None and call.started_at is not None:
            duration_ms = round((self._clock() - call.started_at) * 1000)
        return build.tool_call_result_event(
            block.tool_use_id,
            block.content,
            is_error=block.is_error,
            duration_ms=duration_ms,
            parent_tool_use_id=parent,
        )

    def _system_init(self, message: SystemInit) -> list[AgentEvent]:
        if message.session_id:
            self._claude_session_id = message.session_id
        self._tools = tuple(message.tools)
        self._model = message.model
        events: list[AgentEvent] = []
        info = (message.model, message.cwd)
        if info != self._announced_info:
            self._announced_info = info
            events.append(
                AgentEvent(
                    session_info=agent_pb2.SessionInfo(
                        session_id=self._session_id,
                        model=message.model,
                        working_directory=message.cwd,
                        worktree_id=self._worktree_id,
                        is_resumed=self._is_resumed,
                    )
                )
            )
        events += self._permission_mode_changed(message.permission_mode)
        events += self.set_status(THINKING)
        return events

    def _system_message(self, message: SystemMessage) -> list[AgentEvent]:
        raw = message.raw
        if message.subtype == "status":
            mode = raw.get("permissionMode")
            events = self._permission_mode_changed(mode if isinstance(mode, str) else "")
            status = raw.get("status")
            if status == "compacting":
                events += self.set_status(COMPACTING)
            elif status == "requesting":
                events += self.set_status(THINKING)
            return events
        if message.subtype == "api_retry":
            return [build.api_retry_event(raw)]
        if message.subtype == "error":  # the Dart SDK dialect's `error` line
            return [build.reported_error_event(raw)]
        return []

    def _permission_mode_changed(self, mode: str) -> list[AgentEvent]:
        if not mode or mode == self._permission_mode:
            return []
        was_plan = self._permission_mode == "plan"
        self._permission_mode = mode
        if mode == "plan":
            return [AgentEvent(plan_mode=agent_pb2.PlanModeChange(active=True))]
        if was_plan:
            plan, self._pending_plan = self._pending_plan, ""
            return [AgentEvent(plan_mode=agent_pb2.PlanModeChange(active=False, plan=plan))]
        return []

    def _result(self, message: ResultMessage) -> list[AgentEvent]:
        cost = self._cost.turn_cost(message)
        turn = turn_usage(
            message, model=self._model, cost_usd=cost, cancelled=self._cancel_requested
        )
        self._last_usage = turn
        self._cancel_requested = False
        self._running_top_level.clear()
        return build.turn_end_events(turn) + self.set_status(IDLE)


def _trim(recent: dict[str, Any]) -> None:
    while len(recent) > _RECENT_CAP:
        del recent[next(iter(recent))]
