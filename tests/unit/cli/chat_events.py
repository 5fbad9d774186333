"""Real betcode.v1 AgentEvents, built the way the daemon builds them, for the chat tests."""

from __future__ import annotations

from typing import Any

from google.protobuf.struct_pb2 import Struct

from betcode.v1 import agent_pb2, common_pb2

AgentEvent = agent_pb2.AgentEvent


def _struct(value: dict[str, Any]) -> Struct:
    struct = Struct()
    struct.update(value)
    return struct


def text(chunk: str, *, complete: bool = False, parent: str = "") -> AgentEvent:
    delta = agent_pb2.TextDelta(text=chunk, is_complete=complete)
    return AgentEvent(text_delta=delta, parent_tool_use_id=parent)


def tool_start(
    tool_id: str, name: str, tool_input: dict[str, Any], *, parent: str = ""
) -> AgentEvent:
    start = agent_pb2.ToolCallStart(tool_id=tool_id, tool_name=name, input=_struct(tool_input))
    return AgentEvent(tool_call_start=start, parent_tool_use_id=parent)


def tool_result(
    tool_id: str, output: str, *, is_error: bool = False, parent: str = ""
) -> AgentEvent:
    result = agent_pb2.ToolCallResult(tool_id=tool_id, output=output, is_error=is_error)
    return AgentEvent(tool_call_result=result, parent_tool_use_id=parent)


def permission(
    request_id: str, tool: str, tool_input: dict[str, Any], *, tool_use_id: str = ""
) -> AgentEvent:
    request = agent_pb2.PermissionRequest(
        request_id=request_id,
        tool_name=tool,
        description=f"{tool} wants to run",
        input=_struct(tool_input),
        tool_use_id=tool_use_id,
        decision_reason="no rule matched",
    )
    return AgentEvent(permission_request=request)


def question(question_id: str, *prompts: tuple[str, list[str], bool]) -> AgentEvent:
    """prompts: (question text, option labels, multi_select)."""
    built = [
        agent_pb2.QuestionPrompt(
            question=text_,
            header=f"Q{n + 1}",
            options=[common_pb2.QuestionOption(value=o, label=o) for o in options],
            multi_select=multi,
        )
        for n, (text_, options, multi) in enumerate(prompts)
    ]
    first = built[0]
    event = agent_pb2.UserQuestion(
        question_id=question_id,
        question=first.question,
        options=first.options,
        multi_select=first.multi_select,
        questions=built,
    )
    return AgentEvent(user_question=event)


def resolved(
    request_id: str, outcome: str, *, by: str = "", edited: dict[str, Any] | None = None
) -> AgentEvent:
    done = agent_pb2.PermissionResolved(
        request_id=request_id,
        outcome=outcome,
        decided_by_client_id=by,
        updated_input=None if edited is None else _struct(edited),
    )
    return AgentEvent(permission_resolved=done)


def status(value: common_pb2.AgentStatus.ValueType, message: str = "") -> AgentEvent:
    return AgentEvent(status_change=agent_pb2.StatusChange(status=value, message=message))


def session_info(session_id: str, model: str = "claude-test", cwd: str = "/work") -> AgentEvent:
    info = agent_pb2.SessionInfo(session_id=session_id, model=model, working_directory=cwd)
    return AgentEvent(session_info=info)


def usage(input_tokens: int, output_tokens: int, cost: float) -> AgentEvent:
    report = agent_pb2.UsageReport(
        input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost, model="claude-test"
    )
    return AgentEvent(usage=report)


def turn_complete() -> AgentEvent:
    return AgentEvent(turn_complete=agent_pb2.TurnComplete(stop_reason="end_turn"))


def user_input(content: str) -> AgentEvent:
    return AgentEvent(user_input=agent_pb2.UserInput(content=content))


def input_lock(holder: str) -> AgentEvent:
    return AgentEvent(input_lock=agent_pb2.InputLockChange(holder_client_id=holder))


def error(code: str, message: str, *, fatal: bool = False, **details: str) -> AgentEvent:
    event = agent_pb2.ErrorEvent(code=code, message=message, is_fatal=fatal, details=details)
    return AgentEvent(error=event)


THINKING = common_pb2.AGENT_STATUS_THINKING
EXECUTING_TOOL = common_pb2.AGENT_STATUS_EXECUTING_TOOL
WAITING = common_pb2.AGENT_STATUS_WAITING_FOR_USER
IDLE = common_pb2.AGENT_STATUS_IDLE
RESTARTING = common_pb2.AGENT_STATUS_RESTARTING
CRASHED = common_pb2.AGENT_STATUS_CRASHED
ERROR = common_pb2.AGENT_STATUS_ERROR
COMPACTING = common_pb2.AGENT_STATUS_COMPACTING
