"""The chat's view-model: AgentEvents in, what the screen shows out. No Textual here.

``ChatModel.apply(event)`` folds one event into the transcript (blocks), the prompts waiting for
an answer and the status line, and returns what changed so the widgets redraw only that.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from betcode.cli.chat.state import (
    ACTIVITY_OF_STATUS,
    TURN_RUNNING,
    Activity,
    Block,
    Changes,
    Choice,
    LockRequest,
    NoticeBlock,
    PermissionPrompt,
    Prompt,
    Question,
    QuestionPrompt,
    Status,
    TextBlock,
    ToolBlock,
    UserBlock,
)
from betcode.cli.connection import client_label, other_client_label
from betcode.v1 import agent_pb2, common_pb2

# A lock request whose settling event never comes (the daemon restarted during the wait, the
# requester's call was cancelled) is dropped this long after its deadline.
LOCK_REQUEST_GRACE = timedelta(seconds=5)


def struct_to_dict(value: Struct) -> dict[str, Any]:
    return MessageToDict(value, preserving_proto_field_name=True)


class ChatModel:
    def __init__(self, client_id: str) -> None:
        self.client_id = client_id  # to tell whether the input lock's holder is this client
        self.blocks: dict[int, Block] = {}
        self.prompts: dict[str, Prompt] = {}
        self.status = Status()
        self._open_text: dict[str, TextBlock] = {}  # parent tool use id -> block being streamed
        self._tools: dict[str, ToolBlock] = {}
        self._nested_in: dict[int, int] = {}  # a Task subagent's block -> its Task call's block
        self._settled: dict[str, Prompt] = {}  # answered or withdrawn, to name their outcome
        self._lock_requests: dict[str, LockRequest] = {}  # waiting ones, by requester id

    @property
    def turn_running(self) -> bool:
        return self.status.activity in TURN_RUNNING

    @property
    def active_prompt(self) -> Prompt | None:
        return next(iter(self.prompts.values()), None)

    def apply(self, event: agent_pb2.AgentEvent) -> Changes:
        changes = Changes()
        kind = event.WhichOneof("event")
        if kind is None:
            return changes
        if kind == "input_lock_requested":  # its answer time is counted from the event's own
            self._lock_requested(event.input_lock_requested, event.timestamp, changes)
            return changes
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(getattr(event, kind), event.parent_tool_use_id, changes)
        if self._nested_in:  # a change inside a Task call redraws that call
            changes.blocks = {self._nested_in.get(key, key): None for key in changes.blocks}
        return changes

    def set_connection(self, description: str) -> Changes:
        self.status.connection = description
        return Changes(status=True)

    def add_notice(self, text: str, *, is_error: bool = False) -> Changes:
        changes = Changes()
        self._close_text(changes)
        self._add(NoticeBlock(self._next_key(), text, is_error), changes)
        return changes

    def answered(self, request_id: str, updated_input: dict[str, Any] | None = None) -> Changes:
        """This client answered: the prompt goes now. If the answer is lost on the way, the
        daemon re-sends the request (is_replay) and the prompt comes back. An edited input
        is shown at once; the daemon's PermissionResolved carries it too."""
        changes = Changes()
        if updated_input is not None:
            self._show_edited_input(self.prompts.get(request_id), updated_input, changes)
        self._drop_prompt(request_id, changes)
        return changes

    def label(self, client_id: str) -> str:
        """A client as this one names it: "you" for any of this user's terminals on this host."""
        return client_label(client_id, self.client_id)

    def holder_label(self, client_id: str) -> str:
        """The input lock's holder, never this client (it would hold the lock)."""
        return other_client_label(client_id, self.client_id)

    def lock_granted(self) -> Changes:
        """RequestInputLock said yes; the daemon's InputLockChange may follow and agrees."""
        self.status.you_hold_lock = True
        self.status.lock_holder = ""
        return Changes(status=True)

    @property
    def lock_requests_waiting(self) -> bool:
        return bool(self._lock_requests)

    def input_sent(self) -> Changes:
        """This client (the holder) sent input: that answers a request for its lock (the
        daemon's KEPT follows)."""
        answered = [r for r in self._lock_requests.values() if r.holder_id == self.client_id]
        return self._drop_lock_requests(answered)

    def drop_lapsed_lock_requests(self, now: datetime) -> Changes:
        lapsed = self._lock_requests.values()
        return self._drop_lock_requests(
            [r for r in lapsed if r.deadline + LOCK_REQUEST_GRACE < now]
        )

    # --- one handler per AgentEvent kind -------------------------------------------------

    def _on_text_delta(self, delta: agent_pb2.TextDelta, parent: str, changes: Changes) -> None:
        block = self._open_text.get(parent)
        if block is None:
            block = TextBlock(self._next_key(), "", parent)
            self._open_text[parent] = block
            self._add(block, changes)
        block.text += delta.text
        if delta.is_complete:
            block.closed = True
            del self._open_text[parent]
        changes.touch(block.key)

    def _on_tool_call_start(
        self, start: agent_pb2.ToolCallStart, parent: str, changes: Changes
    ) -> None:
        self._close_text(changes, parent)
        block = self._tools.get(start.tool_id)
        if block is None:
            block = ToolBlock(self._next_key(), start.tool_id, "", {}, "", parent)
            self._tools[start.tool_id] = block
            self._add(block, changes)
        block.name = start.tool_name
        block.input = struct_to_dict(start.input)
        block.description = start.description
        changes.touch(block.key)
        self.status.current_tool = start.tool_name
        changes.status = True

    def _on_tool_call_result(
        self, result: agent_pb2.ToolCallResult, parent: str, changes: Changes
    ) -> None:
        block = self._tools.get(result.tool_id)
        if block is None:  # its start is older than the history we have (compacted)
            block = ToolBlock(self._next_key(), result.tool_id, "tool", {}, "", parent)
            self._tools[result.tool_id] = block
            self._add(block, changes)
        block.output = result.output
        block.is_error = result.is_error
        block.duration_ms = result.duration_ms
        changes.touch(block.key)
        for request_id, prompt in list(self.prompts.items()):
            if isinstance(prompt, PermissionPrompt) and prompt.tool_use_id == result.tool_id:
                self._drop_prompt(request_id, changes)

    def _on_permission_request(
        self, request: agent_pb2.PermissionRequest, _parent: str, changes: Changes
    ) -> None:
        # A replayed request (is_replay) carries the original request id: same key, no twin.
        self.prompts[request.request_id] = PermissionPrompt(
            request_id=request.request_id,
            tool_name=request.tool_name,
            description=request.description,
            input=struct_to_dict(request.input),
            tool_use_id=request.tool_use_id,
            decision_reason=request.decision_reason,
            blocked_path=request.blocked_path,
            expires_at=request.expires_at.ToDatetime() if request.HasField("expires_at") else None,
        )
        changes.prompts = True

    def _on_user_question(
        self, question: agent_pb2.UserQuestion, _parent: str, changes: Changes
    ) -> None:
        prompts = [
            Question(p.question, p.header, _choices(p.options), p.multi_select)
            for p in question.questions
        ] or [Question(question.question, "", _choices(question.options), question.multi_select)]
        self.prompts[question.question_id] = QuestionPrompt(question.question_id, tuple(prompts))
        changes.prompts = True

    def _on_permission_resolved(
        self, resolved: agent_pb2.PermissionResolved, _parent: str, changes: Changes
    ) -> None:
        self._drop_prompt(resolved.request_id, changes)
        prompt = self._settled.get(resolved.request_id)
        if isinstance(prompt, PermissionPrompt):
            what = prompt.tool_name
        else:
            what = "question" if prompt is not None else "request"
        text = f"{what}: {resolved.outcome or 'settled'}"
        if resolved.HasField("updated_input"):  # edited here, in another terminal, or history
            self._show_edited_input(prompt, struct_to_dict(resolved.updated_input), changes)
            text += " with an edited input"
        if resolved.decided_by_client_id:
            text += f" by {self.label(resolved.decided_by_client_id)}"
        if resolved.message:
            text += f" ({resolved.message})"
        self._close_text(changes)
        self._add(NoticeBlock(self._next_key(), text), changes)

    def _on_permission_reminder(
        self, reminder: agent_pb2.PermissionReminder, _parent: str, changes: Changes
    ) -> None:
        prompt = self.prompts.get(reminder.request_id)
        if isinstance(prompt, PermissionPrompt):
            prompt.waiting_seconds = reminder.waiting_seconds
            changes.prompts = True

    def _on_status_change(
        self, change: agent_pb2.StatusChange, _parent: str, changes: Changes
    ) -> None:
        self.status.activity = ACTIVITY_OF_STATUS.get(change.status, self.status.activity)
        changes.status = True
        if change.status == common_pb2.AGENT_STATUS_ERROR and change.message:
            self._close_text(changes)
            self._add(NoticeBlock(self._next_key(), change.message, is_error=True), changes)
        elif change.status == common_pb2.AGENT_STATUS_QUEUED and change.message:
            self._add(NoticeBlock(self._next_key(), change.message), changes)

    def _on_session_info(self, info: agent_pb2.SessionInfo, _parent: str, changes: Changes) -> None:
        self.status.session_id = info.session_id or self.status.session_id
        self.status.model = info.model or self.status.model
        self.status.working_directory = info.working_directory or self.status.working_directory
        if self.status.activity is Activity.STARTING:  # attached; nothing has run yet
            self.status.activity = Activity.IDLE
        changes.status = True
        if info.is_compacted:
            self._add(NoticeBlock(self._next_key(), "Earlier history was compacted."), changes)

    def _on_error(self, error: agent_pb2.ErrorEvent, _parent: str, changes: Changes) -> None:
        self._close_text(changes)
        prefix = error.code or "error"
        self._add(NoticeBlock(self._next_key(), f"{prefix}: {error.message}", True), changes)
        if error.code == "NO_INPUT_LOCK":
            self.status.you_hold_lock = False
            holder = error.details.get("holder_client_id")
            self.status.lock_holder = self.holder_label(holder) if holder else "another client"
            changes.status = True

    def _on_usage(self, usage: agent_pb2.UsageReport, _parent: str, changes: Changes) -> None:
        # One report per turn; the session's totals are their sum (history replays them all).
        self.status.input_tokens += usage.input_tokens
        self.status.output_tokens += usage.output_tokens
        self.status.cost_usd += usage.cost_usd
        self.status.model = usage.model or self.status.model
        changes.status = True

    def _on_turn_complete(
        self, turn: agent_pb2.TurnComplete, _parent: str, changes: Changes
    ) -> None:
        # Nothing of a finished turn can still wait for an answer (guards against stale
        # prompts replayed from history).
        self._close_text(changes)
        for request_id in list(self.prompts):
            self._drop_prompt(request_id, changes)
        self.status.current_tool = ""
        changes.status = True
        if turn.stop_reason == "cancelled":
            self._add(NoticeBlock(self._next_key(), "Turn cancelled."), changes)

    def _on_user_input(self, user: agent_pb2.UserInput, _parent: str, changes: Changes) -> None:
        self._close_text(changes)
        self._add(UserBlock(self._next_key(), user.content), changes)

    def _on_input_lock(
        self, lock: agent_pb2.InputLockChange, _parent: str, changes: Changes
    ) -> None:
        # Stored lock events are shared by every client, so `you_hold` is False in them.
        you_hold = lock.you_hold or lock.holder_client_id == self.client_id
        self.status.you_hold_lock = you_hold
        holder = lock.holder_client_id
        self.status.lock_holder = "" if you_hold or not holder else self.holder_label(holder)
        changes.status = True
        # A move settles every request waiting for the previous holder.
        changes.merge(self._drop_lock_requests(list(self._lock_requests.values())))

    def _lock_requested(
        self, asked: agent_pb2.InputLockRequested, stamp: Timestamp, changes: Changes
    ) -> None:
        requester = asked.requested_by_client_id
        if asked.state == agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING:
            deadline = asked.request_deadline.ToDatetime(tzinfo=UTC)
            seconds = (deadline - stamp.ToDatetime(tzinfo=UTC)).total_seconds()
            request = LockRequest(requester, asked.holder_client_id, deadline, round(seconds))
            self._lock_requests[requester] = request
            self._show_lock_requests()
            changes.status = True
        elif requester in self._lock_requests:  # KEPT: the holder answered by sending input
            changes.merge(self._drop_lock_requests([self._lock_requests[requester]]))

    def _on_plan_mode(self, plan: agent_pb2.PlanModeChange, _parent: str, changes: Changes) -> None:
        text = f"Plan mode on.\n\n{plan.plan}" if plan.active else "Plan mode off."
        self._close_text(changes)
        self._add(NoticeBlock(self._next_key(), text), changes)

    # --- helpers -------------------------------------------------------------------------

    def _next_key(self) -> int:
        return len(self.blocks)

    def _add(self, block: Block, changes: Changes) -> None:
        self.blocks[block.key] = block
        parent = getattr(block, "parent_tool_use_id", "")
        task = self._tools.get(parent) if parent else None
        if task is not None:
            # Nested as deep as they come, under the outermost Task call on screen.
            outer = self._nested_in.get(task.key, task.key)
            self._nested_in[block.key] = outer
            task.nested.append(block)
        changes.touch(block.key)

    def _close_text(self, changes: Changes, parent: str | None = None) -> None:
        for key in [parent] if parent is not None else list(self._open_text):
            block = self._open_text.pop(key, None)
            if block is not None:
                block.closed = True
                changes.touch(block.key)

    def _show_edited_input(
        self, prompt: Prompt | None, updated_input: dict[str, Any], changes: Changes
    ) -> None:
        """The tool call shows the input that runs, not the one claude asked with."""
        if isinstance(prompt, PermissionPrompt):
            block = self._tools.get(prompt.tool_use_id)
            if block is not None:
                block.input = updated_input
                changes.touch(block.key)

    def _drop_lock_requests(self, requests: list[LockRequest]) -> Changes:
        for request in requests:
            del self._lock_requests[request.requester_id]
        self._show_lock_requests()
        return Changes(status=bool(requests))

    def _show_lock_requests(self) -> None:
        """The notice of the request that concerns this client most: one asking it for the
        lock, then its own, then the latest between others."""
        requests = list(self._lock_requests.values())
        to_me = [r for r in requests if r.holder_id == self.client_id]
        by_me = [r for r in requests if r.requester_id == self.client_id]
        self.status.asked_for_lock = bool(to_me)
        if to_me:
            request = to_me[-1]
            self.status.lock_notice = (
                f"{self.holder_label(request.requester_id)} asks for the input lock — "
                f"send a message within {request.seconds} s to keep it"
            )
        elif by_me:
            request = by_me[-1]
            self.status.lock_notice = (
                f"waiting for {self.holder_label(request.holder_id)} ({request.seconds} s)"
            )
        elif requests:
            request = requests[-1]
            self.status.lock_notice = (
                f"{self.holder_label(request.requester_id)} asked "
                f"{self.holder_label(request.holder_id)} for the input lock"
            )
        else:
            self.status.lock_notice = ""

    def _drop_prompt(self, request_id: str, changes: Changes) -> None:
        prompt = self.prompts.pop(request_id, None)
        if prompt is not None:
            self._settled[request_id] = prompt
            changes.prompts = True


def _choices(options: Any) -> tuple[Choice, ...]:
    return tuple(Choice(o.value, o.label, o.description) for o in options)
