"""Builders of single betcode.v1 AgentEvents, pure functions of their arguments.

`Translator` (translate.py) uses them for events that come from claude's stdout; the session and
the permission layer use them directly for events that come from the daemon itself (forwarded
permission requests and questions, their resolution, reminders, input-lock moves, user input,
status changes, errors). Events are built WITHOUT `sequence` and `timestamp`: the session assigns
both when it stores the event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

from google.protobuf import struct_pb2, timestamp_pb2

from betcode.protocol.messages import CanUseTool
from betcode.sessions.turn_usage import TurnUsage
from betcode.v1 import agent_pb2, common_pb2

AgentEvent = agent_pb2.AgentEvent
AgentStatus: TypeAlias = common_pb2.AgentStatus.ValueType

_UINT32_MAX = 2**32 - 1

# Where a tool input that could not be rebuilt from its fragments keeps the raw text.
UNPARSED_INPUT_KEY = "unparsed_input_json"


def kind_of(event: AgentEvent) -> str:
    """The name of the event's oneof member (`text_delta`, `usage`, …): the events.kind column."""
    kind = event.WhichOneof("event")
    if kind is None:
        raise ValueError("AgentEvent has no event member set; every stored event needs one")
    return kind


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def as_uint32(value: int) -> int:
    """Clamps a count to the uint32 range of the wire fields (negative or huge input is bad data,
    not a reason to fail the whole stream)."""
    return min(max(value, 0), _UINT32_MAX)


def _timestamp(epoch_seconds: int | None) -> timestamp_pb2.Timestamp | None:
    return None if epoch_seconds is None else timestamp_pb2.Timestamp(seconds=epoch_seconds)


def text_delta_event(
    text: str, *, is_complete: bool = False, parent_tool_use_id: str = ""
) -> AgentEvent:
    # The most frequent event by far: fields are set in place (assigning even "" selects the
    # oneof member), ~3x cheaper than building it from keyword arguments.
    event = AgentEvent()
    delta = event.text_delta
    delta.text = text
    if is_complete:
        delta.is_complete = True
    if parent_tool_use_id:
        event.parent_tool_use_id = parent_tool_use_id
    return event


def tool_call_start_event(
    tool_id: str, tool_name: str, tool_input: Mapping[str, Any], *, parent_tool_use_id: str = ""
) -> AgentEvent:
    description = tool_input.get("description")
    return AgentEvent(
        parent_tool_use_id=parent_tool_use_id,
        tool_call_start=agent_pb2.ToolCallStart(
            tool_id=tool_id,
            tool_name=tool_name,
            input=to_struct(tool_input),
            description=description if isinstance(description, str) else "",
        ),
    )


def tool_call_result_event(
    tool_id: str, output: str, *, is_error: bool, duration_ms: int, parent_tool_use_id: str = ""
) -> AgentEvent:
    return AgentEvent(
        parent_tool_use_id=parent_tool_use_id,
        tool_call_result=agent_pb2.ToolCallResult(
            tool_id=tool_id, output=output, is_error=is_error, duration_ms=as_uint32(duration_ms)
        ),
    )


def rebuild_input(partial_json: str) -> dict[str, Any]:
    """A tool input from its concatenated input_json_delta fragments. Text that is not a JSON
    object (a cut-off stream) is kept under UNPARSED_INPUT_KEY rather than lost or raised."""
    if not partial_json.strip():
        return {}
    try:
        value = json.loads(partial_json)
    except ValueError:
        return {UNPARSED_INPUT_KEY: partial_json}
    return value if isinstance(value, dict) else {UNPARSED_INPUT_KEY: partial_json}


def turn_end_events(turn: TurnUsage) -> list[AgentEvent]:
    """ErrorEvent (only for a turn that failed on its own), UsageReport, TurnComplete."""
    events = []
    if turn.error_message is not None:
        events.append(error_event("AGENT_ERROR", turn.error_message, details=turn.error_details))
    usage = agent_pb2.UsageReport(
        input_tokens=as_uint32(turn.input_tokens),
        output_tokens=as_uint32(turn.output_tokens),
        cache_read_tokens=as_uint32(turn.cache_read_tokens),
        cache_creation_tokens=as_uint32(turn.cache_creation_tokens),
        model=turn.model,
        cost_usd=turn.cost_usd,
        duration_ms=as_uint32(turn.duration_ms),
    )
    events.append(AgentEvent(usage=usage))
    denials = [
        agent_pb2.PermissionDenial(
            tool_name=denial.tool_name,
            tool_use_id=denial.tool_use_id,
            tool_input=to_struct(denial.tool_input),
        )
        for denial in turn.permission_denials
    ]
    complete = agent_pb2.TurnComplete(stop_reason=turn.stop_reason, permission_denials=denials)
    events.append(AgentEvent(turn_complete=complete))
    return events


def api_retry_event(raw: Mapping[str, Any]) -> AgentEvent:
    """`system/api_retry`: a non-fatal API_RETRY error carrying the attempt and the delay."""
    details = {
        key: str(raw[key])
        for key in ("attempt", "max_retries", "retry_delay_ms", "error_status", "error")
        if raw.get(key) is not None
    }
    reason = details.get("error", "unknown error")
    attempt = details.get("attempt", "?")
    limit = details.get("max_retries", "?")
    message = f"API request failed ({reason}); retry {attempt} of {limit}"
    if "retry_delay_ms" in details:
        message += f" in {details['retry_delay_ms']} ms"
    return error_event("API_RETRY", message, details=details)


def reported_error_event(raw: Mapping[str, Any]) -> AgentEvent:
    """An error line of the Dart SDK dialect: `{"type":"error","error":{code, message}}`."""
    error = raw.get("error")
    if isinstance(error, Mapping):
        code, message = _string(error.get("code")), _string(error.get("message"))
    else:
        code, message = "", _string(error)
    return error_event(code or "AGENT_ERROR", message or "claude reported an error")


def status_event(status: AgentStatus, message: str = "") -> AgentEvent:
    return AgentEvent(status_change=agent_pb2.StatusChange(status=status, message=message))


def error_event(
    code: str, message: str, *, is_fatal: bool = False, details: Mapping[str, str] | None = None
) -> AgentEvent:
    return AgentEvent(
        error=agent_pb2.ErrorEvent(code=code, message=message, is_fatal=is_fatal, details=details)
    )


def user_input_event(text: str) -> AgentEvent:
    return AgentEvent(user_input=agent_pb2.UserInput(content=text))


def permission_request_event(
    request_id: str,
    request: CanUseTool,
    *,
    is_replay: bool = False,
    expires_at: int | None = None,
    parent_tool_use_id: str = "",
) -> AgentEvent:
    """A forwarded `can_use_tool`. `expires_at` is in Unix epoch seconds (as stored);
    `parent_tool_use_id` comes from `Translator.parent_tool_use_id_of(request.tool_use_id)`."""
    return AgentEvent(
        parent_tool_use_id=parent_tool_use_id,
        permission_request=agent_pb2.PermissionRequest(
            request_id=request_id,
            tool_name=request.tool_name,
            description=request.description or request.decision_reason or "",
            input=to_struct(request.input),
            is_replay=is_replay,
            tool_use_id=request.tool_use_id or "",
            expires_at=_timestamp(expires_at),
            decision_reason=request.decision_reason or "",
            blocked_path=request.blocked_path or "",
        ),
    )


def user_question_event(
    request_id: str, request: CanUseTool, *, is_replay: bool = False, parent_tool_use_id: str = ""
) -> AgentEvent:
    """A forwarded AskUserQuestion. Every question goes into `questions`; the first one also
    fills the upstream fields `question` / `options` / `multi_select`, which older clients read."""
    prompts = question_prompts(request.input)
    first = prompts[0] if prompts else agent_pb2.QuestionPrompt()
    return AgentEvent(
        parent_tool_use_id=parent_tool_use_id,
        user_question=agent_pb2.UserQuestion(
            question_id=request_id,
            question=first.question,
            options=first.options,
            multi_select=first.multi_select,
            is_replay=is_replay,
            questions=prompts,
        ),
    )


def question_prompts(tool_input: Mapping[str, Any]) -> list[agent_pb2.QuestionPrompt]:
    """AskUserQuestion's `questions[]` as QuestionPrompts. Accepts `multiSelect` (the CLI's
    schema) and `multi_select` (the seed's), options as strings or `{label, description}`."""
    raw_questions = tool_input.get("questions")
    if not isinstance(raw_questions, list):
        return []
    prompts = []
    for raw in raw_questions:
        if not isinstance(raw, Mapping):
            continue
        multi_select = raw.get("multiSelect", raw.get("multi_select", False))
        prompts.append(
            agent_pb2.QuestionPrompt(
                question=_string(raw.get("question")),
                header=_string(raw.get("header")),
                options=[
                    option
                    for option in map(_question_option, _list(raw.get("options")))
                    if option is not None
                ],
                multi_select=multi_select is True,
            )
        )
    return prompts


def _question_option(raw: object) -> common_pb2.QuestionOption | None:
    if isinstance(raw, str):
        return common_pb2.QuestionOption(value=raw, label=raw)
    if isinstance(raw, Mapping):
        label = _string(raw.get("label"))
        return common_pb2.QuestionOption(
            value=label, label=label, description=_string(raw.get("description"))
        )
    return None


def permission_resolved_event(
    request_id: str,
    outcome: str,
    *,
    message: str = "",
    decided_by_client_id: str = "",
    updated_input: Mapping[str, Any] | None = None,
) -> AgentEvent:
    """`outcome` is one of allowed | denied | expired | cancelled | answered; `updated_input`
    is the input that ran when the answer edited it."""
    resolved = agent_pb2.PermissionResolved(
        request_id=request_id,
        outcome=outcome,
        message=message,
        decided_by_client_id=decided_by_client_id,
    )
    if updated_input is not None:
        resolved.updated_input.update(updated_input)
    return AgentEvent(permission_resolved=resolved)


def permission_reminder_event(
    request_id: str, tool_name: str, waiting_seconds: int, *, expires_at: int | None = None
) -> AgentEvent:
    return AgentEvent(
        permission_reminder=agent_pb2.PermissionReminder(
            request_id=request_id,
            tool_name=tool_name,
            waiting_seconds=max(waiting_seconds, 0),
            expires_at=_timestamp(expires_at),
        )
    )


def input_lock_event(holder_client_id: str, *, you_hold: bool = False) -> AgentEvent:
    """`you_hold` is per recipient; an event stored for everyone carries False."""
    return AgentEvent(
        input_lock=agent_pb2.InputLockChange(holder_client_id=holder_client_id, you_hold=you_hold)
    )


def input_lock_requested_event(
    requested_by_client_id: str,
    holder_client_id: str,
    deadline: float,
    *,
    kept: bool = False,
) -> AgentEvent:
    """A RequestInputLock waiting for the holder until ``deadline`` (epoch seconds), or, with
    ``kept``, its end: the holder answered by sending input."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(deadline * 1e9))
    state = (
        agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT
        if kept
        else agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
    )
    return AgentEvent(
        input_lock_requested=agent_pb2.InputLockRequested(
            requested_by_client_id=requested_by_client_id,
            holder_client_id=holder_client_id,
            request_deadline=stamp,
            state=state,
        )
    )


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []
