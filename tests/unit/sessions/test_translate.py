"""Translator: canonical messages (decoded from real CLI 2.1.330 line shapes) → AgentEvents.

The line builders below produce the shapes of docs/PROTOCOL.md#messages-read (cut down the same way
the spec cuts them); every line goes through the real ProtocolReader before it reaches the
translator, exactly as in the daemon.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from betcode.protocol.messages import Message
from betcode.protocol.reader import ProtocolReader
from betcode.sessions.translate import AgentEvent, Translator, kind_of
from betcode.v1 import common_pb2

SID = "3fc6896c-1b2c-4d5e-8f90-a1b2c3d4e5f6"
DAEMON_SID = "daemon-session-1"
MODEL = "claude-opus-5-5"

# ---- real line shapes ---------------------------------------------------------------------------


def init(model: str = MODEL, cwd: str = "/scratch/repo", mode: str = "default") -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "init",
        "cwd": cwd,
        "session_id": SID,
        "tools": ["Task", "AskUserQuestion", "Bash", "Edit", "Read", "Write"],
        "mcp_servers": [],
        "model": model,
        "permissionMode": mode,
        "apiKeySource": "ANTHROPIC_API_KEY",
        "claude_code_version": "2.1.330",
        "output_style": "default",
        "uuid": "2ba53dce-0001",
    }


def status(value: str | None, **extra: Any) -> dict[str, Any]:
    return {"type": "system", "subtype": "status", "status": value, "session_id": SID, **extra}


def stream(event: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return {
        "type": "stream_event",
        "event": event,
        "session_id": SID,
        "parent_tool_use_id": parent,
        "uuid": "5e1f0000-0001",
    }


def message_start(message_id: str, parent: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    return stream({"type": "message_start", "message": message}, parent) | {"ttft_ms": 12}


def text_start(index: int, parent: str | None = None) -> dict[str, Any]:
    block = {"type": "text", "text": ""}
    return stream({"type": "content_block_start", "index": index, "content_block": block}, parent)


def tool_start(index: int, tool_id: str, name: str, parent: str | None = None) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
    return stream({"type": "content_block_start", "index": index, "content_block": block}, parent)


def thinking_start(index: int) -> dict[str, Any]:
    block = {"type": "thinking", "thinking": "", "signature": ""}
    return stream({"type": "content_block_start", "index": index, "content_block": block})


def delta(index: int, body: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return stream({"type": "content_block_delta", "index": index, "delta": body}, parent)


def text_delta(index: int, text: str, parent: str | None = None) -> dict[str, Any]:
    return delta(index, {"type": "text_delta", "text": text}, parent)


def json_delta(index: int, partial: str) -> dict[str, Any]:
    return delta(index, {"type": "input_json_delta", "partial_json": partial})


def block_stop(index: int, parent: str | None = None) -> dict[str, Any]:
    return stream({"type": "content_block_stop", "index": index}, parent)


def message_delta(stop_reason: str | None) -> dict[str, Any]:
    body = {"stop_reason": stop_reason, "stop_sequence": None}
    return stream({"type": "message_delta", "delta": body, "usage": {"output_tokens": 5}})


def message_stop() -> dict[str, Any]:
    return stream({"type": "message_stop"})


def assistant(
    message_id: str, block: dict[str, Any], parent: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
            "context_management": None,
        },
        "parent_tool_use_id": parent,
        "session_id": SID,
        "uuid": "7616ca82-0001",
        "timestamp": "2026-11-21T23:14:37.860Z",
        "request_id": "req_mock_3",
        **extra,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def tool_result_block(tool_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    return {"tool_use_id": tool_id, "type": "tool_result", "content": content, "is_error": is_error}


def user(*blocks: dict[str, Any], parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": list(blocks)},
        "parent_tool_use_id": parent,
        "session_id": SID,
        "uuid": "9a9a0000-0001",
        "timestamp": "2026-11-21T23:14:38.000Z",
        **extra,
    }


def can_use_tool(tool_id: str) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": "41749186-0001",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": BASH_INPUT,
            "description": "Say hello",
            "decision_reason": "This command requires approval",
            "tool_use_id": tool_id,
        },
    }


def result(
    *,
    subtype: str = "success",
    is_error: bool = False,
    text_result: str | None = "Done.",
    stop_reason: str | None = "end_turn",
    terminal_reason: str | None = "completed",
    total_cost: float | None = 0.00014,
    turn_cost: float | None = 0.00014,
    usage: dict[str, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "stop_reason": stop_reason,
        "terminal_reason": terminal_reason,
        "num_turns": 1,
        "duration_ms": 147,
        "duration_api_ms": 37,
        "session_id": SID,
        "uuid": "r0000000-0001",
        "usage": usage
        or {
            "input_tokens": 10,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 7,
            "output_tokens": 5,
            "service_tier": "standard",
        },
        "permission_denials": [],
        **extra,
    }
    if text_result is not None:
        line["result"] = text_result
    if total_cost is not None:
        line["total_cost_usd"] = total_cost
        line["modelUsage"] = {MODEL: {"inputTokens": 10, "costUSD": total_cost}}
    if turn_cost is not None:
        line["model_usage_since_last_result"] = {MODEL: {"inputTokens": 10, "costUSD": turn_cost}}
    return line


BASH_INPUT = {"command": "python3 -c \"print('hello-from-bash')\"", "description": "Say hello"}

# ---- helpers ------------------------------------------------------------------------------------


def decode(line: dict[str, Any]) -> Message:
    message = ProtocolReader().decode(json.dumps(line).encode())
    assert message is not None, line
    return message


def feed(translator: Translator, *lines: dict[str, Any]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for line in lines:
        events += translator.translate(decode(line))
    return events


def brief(event: AgentEvent) -> tuple[Any, ...]:
    """An event as a short tuple for table comparisons."""
    kind = kind_of(event)
    body = getattr(event, kind)
    if kind == "text_delta":
        return (kind, body.text, body.is_complete)
    if kind == "tool_call_start":
        return (kind, body.tool_id, body.tool_name, MessageToDict(body.input))
    if kind == "tool_call_result":
        return (kind, body.tool_id, body.output, body.is_error)
    if kind == "status_change":
        return (kind, common_pb2.AgentStatus.Name(body.status))
    if kind == "session_info":
        return (kind, body.session_id, body.model, body.working_directory, body.is_resumed)
    if kind == "usage":
        return (kind, body.input_tokens, body.output_tokens, round(body.cost_usd, 8))
    if kind == "turn_complete":
        return (kind, body.stop_reason)
    if kind == "error":
        return (kind, body.code, body.message)
    if kind == "plan_mode":
        return (kind, body.active, body.plan)
    raise AssertionError(f"no brief form for {kind}")


def briefs(events: list[AgentEvent]) -> list[tuple[Any, ...]]:
    return [brief(event) for event in events]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def status_of(name: str) -> tuple[str, str]:
    return ("status_change", f"AGENT_STATUS_{name}")


SESSION_INFO = ("session_info", DAEMON_SID, MODEL, "/scratch/repo", False)
USAGE = ("usage", 10, 5, 0.00014)

# ---- whole turns --------------------------------------------------------------------------------


def test_partial_messages_turn_in_the_order_the_cli_emits_it() -> None:
    """docs/PROTOCOL.md#a-turn, with --include-partial-messages."""
    translator = Translator(DAEMON_SID)
    events = feed(
        translator,
        init(),
        status("requesting"),
        message_start("msg_mock_1"),
        text_start(0),
        text_delta(0, "Running "),
        text_delta(0, "it."),
        assistant("msg_mock_1", text("Running it.")),
        block_stop(0),
        tool_start(1, "toolu_001", "Bash"),
        json_delta(1, '{"command": "python3 -c \\"print(\'hello-from-bash\')\\"", '),
        json_delta(1, '"description": "Say hello"}'),
        assistant("msg_mock_1", tool_use("toolu_001", "Bash", BASH_INPUT)),
        block_stop(1),
        can_use_tool("toolu_001"),
        message_delta("tool_use"),
        message_stop(),
        user(tool_result_block("toolu_001", "hello-from-bash")),
        status("requesting"),
        message_start("msg_mock_2"),
        text_start(0),
        text_delta(0, "It printed hello."),
        assistant("msg_mock_2", text("It printed hello.")),
        block_stop(0),
        message_delta("end_turn"),
        message_stop(),
        result(),
    )
    assert briefs(events) == [
        SESSION_INFO,
        status_of("THINKING"),
        ("text_delta", "Running ", False),
        ("text_delta", "it.", False),
        ("text_delta", "", True),
        ("tool_call_start", "toolu_001", "Bash", BASH_INPUT),
        status_of("EXECUTING_TOOL"),
        ("tool_call_result", "toolu_001", "hello-from-bash", False),
        status_of("THINKING"),
        ("text_delta", "It printed hello.", False),
        ("text_delta", "", True),
        USAGE,
        ("turn_complete", "end_turn"),
        status_of("IDLE"),
    ]
    assert all(event.parent_tool_use_id == "" for event in events)
    assert all(event.sequence == 0 and not event.HasField("timestamp") for event in events)
    assert events[5].tool_call_start.description == "Say hello"


def test_turn_without_partial_messages_takes_text_and_tools_from_assistant_lines() -> None:
    translator = Translator(DAEMON_SID)
    events = feed(
        translator,
        init(),
        assistant("msg_mock_1", text("Running it.")),
        assistant("msg_mock_1", tool_use("toolu_001", "Bash", BASH_INPUT)),
        user(tool_result_block("toolu_001", "hello-from-bash")),
        assistant("msg_mock_2", text("It printed hello.")),
        result(),
    )
    assert briefs(events) == [
        SESSION_INFO,
        status_of("THINKING"),
        ("text_delta", "Running it.", True),
        ("tool_call_start", "toolu_001", "Bash", BASH_INPUT),
        status_of("EXECUTING_TOOL"),
        ("tool_call_result", "toolu_001", "hello-from-bash", False),
        status_of("THINKING"),
        ("text_delta", "It printed hello.", True),
        USAGE,
        ("turn_complete", "end_turn"),
        status_of("IDLE"),
    ]


def test_tool_input_is_rebuilt_from_fragments_when_the_block_stops_first() -> None:
    translator = Translator(DAEMON_SID)
    events = feed(
        translator,
        message_start("msg_1"),
        tool_start(0, "toolu_7", "Write"),
        json_delta(0, '{"file_path": "/scratch/repo/a.txt",'),
        json_delta(0, ' "content": "line 1\\nline 2", "n": [1, {"x": null}]}'),
        block_stop(0),
        # The assistant line for an already announced tool adds nothing.
        assistant("msg_1", tool_use("toolu_7", "Write", {"file_path": "other"})),
    )
    expected_input = {
        "file_path": "/scratch/repo/a.txt",
        "content": "line 1\nline 2",
        "n": [1, {"x": None}],
    }
    assert briefs(events) == [
        status_of("THINKING"),
        ("tool_call_start", "toolu_7", "Write", expected_input),
        status_of("EXECUTING_TOOL"),
    ]


def test_a_cut_off_tool_input_keeps_its_raw_text() -> None:
    events = feed(
        Translator(DAEMON_SID),
        tool_start(2, "toolu_8", "Bash"),
        json_delta(2, '{"command": "ls'),
        block_stop(2),
    )
    assert briefs(events)[0] == (
        "tool_call_start",
        "toolu_8",
        "Bash",
        {"unparsed_input_json": '{"command": "ls'},
    )


def test_two_tool_calls_in_one_message_and_results_in_completion_order() -> None:
    translator = Translator(DAEMON_SID)
    read_a = {"file_path": "/etc/a.conf"}
    read_b = {"file_path": "/etc/b.conf"}
    events = feed(
        translator,
        init(),
        assistant("msg_1", tool_use("toolu_a", "Read", read_a)),
        assistant("msg_1", tool_use("toolu_b", "Read", read_b)),
        user(
            tool_result_block(
                "toolu_b", [{"type": "text", "text": "B1"}, {"type": "text", "text": "B2"}]
            )
        ),
        user(tool_result_block("toolu_a", "A", is_error=True)),
    )
    assert briefs(events)[2:] == [
        ("tool_call_start", "toolu_a", "Read", read_a),
        status_of("EXECUTING_TOOL"),
        ("tool_call_start", "toolu_b", "Read", read_b),
        ("tool_call_result", "toolu_b", "B1\nB2", False),
        # THINKING only once no top-level tool is still running.
        ("tool_call_result", "toolu_a", "A", True),
        status_of("THINKING"),
    ]


def test_parallel_results_in_one_user_line() -> None:
    translator = Translator(DAEMON_SID)
    events = feed(
        translator,
        assistant("msg_1", tool_use("toolu_a", "Bash", {"command": "echo a"})),
        assistant("msg_1", tool_use("toolu_b", "Bash", {"command": "echo b"})),
        user(tool_result_block("toolu_a", "a"), tool_result_block("toolu_b", "b")),
    )
    assert briefs(events)[-3:] == [
        ("tool_call_result", "toolu_a", "a", False),
        ("tool_call_result", "toolu_b", "b", False),
        status_of("THINKING"),
    ]


def test_subagent_output_carries_the_task_tool_use_id() -> None:
    translator = Translator(DAEMON_SID)
    task = "toolu_task"
    feed(translator, init(), assistant("msg_1", tool_use(task, "Task", {"prompt": "look"})))
    events = feed(
        translator,
        message_start("msg_sub_1", parent=task),
        text_start(0, parent=task),
        text_delta(0, "sub says hi", parent=task),
        assistant("msg_sub_1", text("sub says hi"), parent=task, agent_id="a1"),
        block_stop(0, parent=task),
        assistant("msg_sub_2", tool_use("toolu_sub_bash", "Bash", {"command": "ls"}), parent=task),
        user(tool_result_block("toolu_sub_bash", "a.txt"), parent=task),
    )
    # A subagent's stream changes no session status: the Task tool is what is executing.
    assert briefs(events) == [
        ("text_delta", "sub says hi", False),
        ("text_delta", "", True),
        ("tool_call_start", "toolu_sub_bash", "Bash", {"command": "ls"}),
        ("tool_call_result", "toolu_sub_bash", "a.txt", False),
    ]
    assert [event.parent_tool_use_id for event in events] == [task] * 4
    assert translator.parent_tool_use_id_of("toolu_sub_bash") == ""  # finished: forgotten
    done = feed(translator, user(tool_result_block(task, "sub finished")))
    assert briefs(done) == [
        ("tool_call_result", task, "sub finished", False),
        status_of("THINKING"),
    ]
    assert done[0].parent_tool_use_id == ""


def test_parent_of_a_tool_is_known_from_its_block_start_for_permission_requests() -> None:
    """The first can_use_tool can come before the assistant line of its tool_use block."""
    translator = Translator(DAEMON_SID)
    feed(translator, tool_start(0, "toolu_sub_w", "Write", parent="toolu_task"))
    assert translator.parent_tool_use_id_of("toolu_sub_w") == "toolu_task"
    assert translator.parent_tool_use_id_of("toolu_unknown") == ""
    assert translator.parent_tool_use_id_of(None) == ""


def test_tool_call_result_duration_is_measured_from_its_start() -> None:
    clock = FakeClock()
    translator = Translator(DAEMON_SID, clock=clock)
    feed(translator, assistant("msg_1", tool_use("toolu_1", "Bash", {"command": "sleep 1"})))
    clock.now += 1.25
    events = feed(translator, user(tool_result_block("toolu_1", "")))
    assert events[0].tool_call_result.duration_ms == 1250
    # A result for a tool never announced (e.g. after a restart) has no known duration.
    orphan = feed(translator, user(tool_result_block("toolu_2", "late")))
    assert orphan[0].tool_call_result.duration_ms == 0


# ---- text that is streamed vs text that only the assistant line has ------------------------------


def test_a_non_streamed_retry_after_a_mid_stream_error_shows_its_text() -> None:
    """docs/PROTOCOL.md#stream-events: after an SSE error the CLI repeats the request without
    streaming and emits an assistant line with a different message id and no stream events."""
    translator = Translator(DAEMON_SID)
    events = feed(
        translator,
        message_start("msg_1"),
        text_start(0),
        text_delta(0, "Hel"),
        block_stop(0),  # synthesized by the CLI after the error
        message_stop(),
        assistant("msg_2", text("Hello again, in full.")),
    )
    assert briefs(events)[1:] == [
        ("text_delta", "Hel", False),
        ("text_delta", "", True),
        ("text_delta", "Hello again, in full.", True),
    ]


def test_thinking_produces_no_text() -> None:
    events = feed(
        Translator(DAEMON_SID),
        message_start("msg_1"),
        thinking_start(0),
        delta(0, {"type": "thinking_delta", "thinking": "let me think"}),
        delta(0, {"type": "signature_delta", "signature": "c2ln"}),
        assistant("msg_1", {"type": "thinking", "thinking": "let me think", "signature": "c2ln"}),
        block_stop(0),
    )
    assert briefs(events) == [status_of("THINKING")]


# ---- result: usage, cost, stop reason, errors ---------------------------------------------------


def test_usage_report_carries_the_turn_usage_and_the_model_of_the_turn() -> None:
    translator = Translator(DAEMON_SID)
    feed(translator, init(model="claude-sonnet-5-5"))
    events = feed(
        translator,
        result(
            usage={
                "input_tokens": 150000,
                "output_tokens": 2000,
                "cache_read_input_tokens": 40,
                "cache_creation_input_tokens": 60,
            }
        ),
    )
    usage = events[0].usage
    assert (usage.input_tokens, usage.output_tokens) == (150000, 2000)
    assert (usage.cache_read_tokens, usage.cache_creation_tokens) == (40, 60)
    assert (usage.model, usage.duration_ms) == ("claude-sonnet-5-5", 147)
    last = translator.last_usage
    assert last is not None
    assert (last.input_tokens, last.cost_usd, last.is_error) == (150000, 0.00014, False)


@pytest.mark.parametrize(
    ("turns", "expected_costs"),
    [
        # The per-turn figures the CLI gives in model_usage_since_last_result.
        ([(0.00014, 0.00014), (0.00042, 0.00028)], [0.00014, 0.00028]),
        # Without them: the growth of the cumulative total_cost_usd.
        ([(0.00014, None), (0.00042, None)], [0.00014, 0.00028]),
    ],
)
def test_cost_per_turn_over_two_turns(
    turns: list[tuple[float, float | None]], expected_costs: list[float]
) -> None:
    translator = Translator(DAEMON_SID)
    costs = []
    for total, per_turn in turns:
        events = feed(translator, init(), result(total_cost=total, turn_cost=per_turn))
        costs.append(round(events[-3].usage.cost_usd, 8))
        assert translator.last_usage is not None
        assert round(translator.last_usage.cost_usd, 8) == costs[-1]
    assert costs == expected_costs


def test_cost_after_a_process_restart_with_resume() -> None:
    """--resume restores the cumulative total (0.0003 here): it is not this turn's spend."""
    translator = Translator(DAEMON_SID)
    feed(translator, init(), result(total_cost=0.0001, turn_cost=None))
    translator.process_restarted()
    first = feed(translator, init(), result(total_cost=0.0003, turn_cost=0.00005))
    second = feed(translator, init(), result(total_cost=0.0004, turn_cost=None))
    assert round(first[-3].usage.cost_usd, 8) == 0.00005
    assert round(second[-3].usage.cost_usd, 8) == 0.0001


def test_cost_of_the_first_turn_of_a_resumed_process_without_per_turn_figures_is_unknown() -> None:
    translator = Translator(DAEMON_SID, is_resumed=True)
    first = feed(translator, init(), result(total_cost=0.0003, turn_cost=None))
    second = feed(translator, init(), result(total_cost=0.00035, turn_cost=None))
    assert first[-3].usage.cost_usd == 0.0
    assert round(second[-3].usage.cost_usd, 8) == 0.00005


def test_a_fresh_process_after_a_restart_counts_from_zero() -> None:
    translator = Translator(DAEMON_SID)
    feed(translator, init(), result(total_cost=0.0005, turn_cost=None))
    translator.process_restarted(resumed=False)
    events = feed(translator, init(), result(total_cost=0.0002, turn_cost=None))
    assert round(events[-3].usage.cost_usd, 8) == 0.0002


def test_cancelled_turn_ends_with_stop_reason_cancelled() -> None:
    """docs/PROTOCOL.md#interrupts interrupt mid-stream: aborted assistant, interrupt marker,
    synthesized stream end, result error_during_execution / aborted_streaming."""
    translator = Translator(DAEMON_SID)
    feed(translator, init(), message_start("msg_1"), text_start(0), text_delta(0, "Once upon"))
    translator.mark_cancel_requested()
    events = feed(
        translator,
        assistant("msg_1", text("Once upon"), aborted=True),
        user(text("[Request interrupted by user]")),
        block_stop(0),
        message_delta(None),
        message_stop(),
        result(
            subtype="error_during_execution",
            is_error=True,
            text_result=None,
            stop_reason=None,
            terminal_reason="aborted_streaming",
            errors=["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"],
        ),
    )
    assert briefs(events) == [
        ("text_delta", "", True),
        USAGE,
        ("turn_complete", "cancelled"),
        status_of("IDLE"),
    ]
    assert translator.last_usage is not None
    assert translator.last_usage.is_error
    # The cancel belonged to that turn only.
    next_turn = feed(translator, init(), result())
    assert ("turn_complete", "end_turn") in briefs(next_turn)


def test_api_error_turn_reports_an_agent_error() -> None:
    """docs/PROTOCOL.md#results: a synthetic assistant message, then subtype success + is_error."""
    translator = Translator(DAEMON_SID)
    feed(translator, init())
    synthetic = assistant(
        "3908785c-0001",
        text("API Error: 400 mock bad request"),
        error="unknown",
        is_api_error_message=True,
        api_error_status=400,
    )
    synthetic["message"]["model"] = "<synthetic>"
    events = feed(
        translator,
        synthetic,
        result(
            is_error=True,
            text_result="API Error: 400 mock bad request",
            stop_reason="stop_sequence",
            terminal_reason="api_error",
            api_error_status=400,
            total_cost=0.0,
            turn_cost=None,
        ),
    )
    assert briefs(events) == [
        ("text_delta", "API Error: 400 mock bad request", True),
        ("error", "AGENT_ERROR", "API Error: 400 mock bad request"),
        ("usage", 10, 5, 0.0),
        ("turn_complete", "api_error"),
        status_of("IDLE"),
    ]
    error = events[1].error
    assert not error.is_fatal
    assert dict(error.details) == {
        "subtype": "success",
        "terminal_reason": "api_error",
        "api_error_status": "400",
    }


@pytest.mark.parametrize(
    ("line", "cancel_requested", "stop_reason", "error_message"),
    [
        (result(), False, "end_turn", None),
        (result(), True, "end_turn", None),  # the interrupt came after the turn had finished
        (
            result(
                subtype="error_during_execution",
                is_error=True,
                text_result=None,
                stop_reason="tool_use",
                terminal_reason="aborted_tools",
            ),
            False,
            "aborted_tools",
            None,  # deny with interrupt: the user's choice, not an error
        ),
        (
            result(
                subtype="error_during_execution",
                is_error=True,
                text_result=None,
                stop_reason="tool_use",
                terminal_reason="aborted_tools",
            ),
            True,
            "cancelled",
            None,
        ),
        (
            result(
                subtype="error_max_turns",
                is_error=True,
                text_result=None,
                terminal_reason="max_turns",
                errors=["Reached maximum number of turns (2)"],
            ),
            False,
            "max_turns",
            "Reached maximum number of turns (2)",
        ),
        (
            result(
                subtype="error_during_execution",
                is_error=True,
                text_result=None,
                stop_reason=None,
                terminal_reason=None,
                errors=["No conversation found with session ID: 1234"],
            ),
            False,
            "error_during_execution",
            "No conversation found with session ID: 1234",
        ),
        (
            result(
                stop_reason=None,
                terminal_reason=None,
                local_command="cost",
                text_result="Total cost: $0.0001",
            ),
            False,
            "success",
            None,
        ),
    ],
)
def test_turn_complete_stop_reason_and_errors(
    line: dict[str, Any], cancel_requested: bool, stop_reason: str, error_message: str | None
) -> None:
    translator = Translator(DAEMON_SID)
    if cancel_requested:
        translator.mark_cancel_requested()
    events = feed(translator, line)
    kinds = [kind_of(event) for event in events]
    assert events[kinds.index("turn_complete")].turn_complete.stop_reason == stop_reason
    errors = [event.error.message for event in events if kind_of(event) == "error"]
    assert errors == ([] if error_message is None else [error_message])


# ---- system lines, session identity -------------------------------------------------------------


def test_session_info_once_per_process_and_on_model_or_cwd_change() -> None:
    translator = Translator(DAEMON_SID, worktree_id="wt-1")
    first = feed(translator, init())
    assert first[0].session_info.worktree_id == "wt-1"
    assert translator.claude_session_id == SID
    assert "Bash" in translator.tools
    infos = [
        brief(e)
        for e in feed(
            translator,
            init(),
            init(model="claude-sonnet-5-5"),
            init(model="claude-sonnet-5-5", cwd="/scratch/other"),
        )
        if kind_of(e) == "session_info"
    ]
    assert infos == [
        ("session_info", DAEMON_SID, "claude-sonnet-5-5", "/scratch/repo", False),
        ("session_info", DAEMON_SID, "claude-sonnet-5-5", "/scratch/other", False),
    ]
    translator.process_restarted()
    again = feed(translator, init(model="claude-sonnet-5-5", cwd="/scratch/other"))
    assert brief(again[0]) == (
        "session_info",
        DAEMON_SID,
        "claude-sonnet-5-5",
        "/scratch/other",
        True,
    )


def test_clear_changes_claude_session_id() -> None:
    translator = Translator(DAEMON_SID)
    feed(translator, init())
    reset = {
        "type": "conversation_reset",
        "new_conversation_id": "7d385bb1-0001",
        "uuid": "7d385bb1-0001",
        "trigger": "clear",
        "session_id": SID,
    }
    assert feed(translator, reset) == []
    assert translator.claude_session_id == "7d385bb1-0001"


def test_plan_mode_changes_follow_the_permission_mode() -> None:
    translator = Translator(DAEMON_SID)
    plan_input = {"plan": "# Plan\n1. create foo.txt\n", "planFilePath": "/h/.claude/plans/p.md"}
    events = feed(
        translator,
        init(),
        status(None, permissionMode="plan"),
        assistant("msg_1", tool_use("toolu_p", "ExitPlanMode", plan_input)),
        user(tool_result_block("toolu_p", "User has approved your plan.")),
        status(None, permissionMode="default"),
        status(None, permissionMode="acceptEdits"),
    )
    plan_events = [brief(e) for e in events if kind_of(e) == "plan_mode"]
    assert plan_events == [
        ("plan_mode", True, ""),
        ("plan_mode", False, "# Plan\n1. create foo.txt\n"),
    ]
    assert translator.permission_mode == "acceptEdits"


def test_a_session_started_in_plan_mode_says_so() -> None:
    events = feed(Translator(DAEMON_SID), init(mode="plan"))
    assert ("plan_mode", True, "") in briefs(events)


def test_compacting_status() -> None:
    translator = Translator(DAEMON_SID)
    events = feed(translator, status("compacting"), status(None, compact_result="success"))
    assert briefs(events) == [status_of("COMPACTING")]


def test_api_retry_is_a_non_fatal_error_with_its_attempt_and_delay() -> None:
    line = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 10,
        "retry_delay_ms": 1018,
        "error_status": 529,
        "error": "overloaded",
        "session_id": SID,
        "uuid": "u",
    }
    (event,) = feed(Translator(DAEMON_SID), line)
    assert (event.error.code, event.error.is_fatal) == ("API_RETRY", False)
    assert event.error.message == "API request failed (overloaded); retry 1 of 10 in 1018 ms"
    assert dict(event.error.details) == {
        "attempt": "1",
        "max_retries": "10",
        "retry_delay_ms": "1018",
        "error_status": "529",
        "error": "overloaded",
    }


def test_dart_sdk_error_line_becomes_an_error_event() -> None:
    line = {"type": "error", "error": {"code": "SESSION_NOT_FOUND", "message": "Session not found"}}
    (event,) = feed(Translator(DAEMON_SID), line)
    assert brief(event) == ("error", "SESSION_NOT_FOUND", "Session not found")


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(can_use_tool("toolu_1"), id="can_use_tool"),
        pytest.param(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": "int_1",
                    "response": {"still_queued": []},
                },
            },
            id="control_response",
        ),
        pytest.param({"type": "control_cancel_request", "request_id": "17c475c9"}, id="cancel"),
        pytest.param({"type": "keep_alive"}, id="keep_alive"),
        pytest.param({"type": "tool_progress", "tool_use_id": "toolu_1"}, id="unknown_type"),
        pytest.param(
            {
                "type": "command_lifecycle",
                "command_uuid": "aaaa",
                "state": "queued",
                "uuid": "u",
                "session_id": SID,
            },
            id="command_lifecycle",
        ),
        pytest.param(user(text("[Request interrupted by user]")), id="interrupt_marker"),
        pytest.param(
            user(
                text("<local-command-stdout>Set model to sonnet</local-command-stdout>"),
                isReplay=True,
            ),
            id="replayed_local_command",
        ),
        pytest.param(
            user(text("Output token limit hit. Resume directly."), isSynthetic=True),
            id="synthetic_user_text",
        ),
        pytest.param(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "session_id": SID,
                "uuid": "u",
                "compact_metadata": {"trigger": "manual", "pre_tokens": 15},
            },
            id="compact_boundary",
        ),
        pytest.param(
            {
                "type": "system",
                "subtype": "task_started",
                "task_id": "aa8e",
                "tool_use_id": "t",
                "session_id": SID,
                "uuid": "u",
            },
            id="task_started",
        ),
        pytest.param(message_delta("end_turn"), id="message_delta"),
        pytest.param(block_stop(5), id="stop_of_an_unknown_block"),
    ],
)
def test_lines_that_give_clients_nothing(line: dict[str, Any]) -> None:
    assert feed(Translator(DAEMON_SID), line) == []


# ---- status bookkeeping -------------------------------------------------------------------------


def test_set_status_reports_only_changes() -> None:
    translator = Translator(DAEMON_SID)
    waiting = common_pb2.AGENT_STATUS_WAITING_FOR_USER
    assert briefs(translator.set_status(waiting)) == [status_of("WAITING_FOR_USER")]
    assert translator.set_status(waiting) == []
    restarting = translator.set_status(common_pb2.AGENT_STATUS_RESTARTING, "attempt 1")
    assert restarting[0].status_change.message == "attempt 1"
    assert translator.status == common_pb2.AGENT_STATUS_RESTARTING
    # A status set from outside is remembered: the next turn start is a change again.
    assert briefs(feed(translator, init()))[-1] == status_of("THINKING")


# ---- a daemon restart: the re-attached claude's lines recalled ----------------------------------

TWO_TURNS = [
    init(),
    message_start("msg_mock_1"),
    text_start(0),
    text_delta(0, "Running "),
    text_delta(0, "it."),
    assistant("msg_mock_1", text("Running it.")),
    block_stop(0),
    tool_start(1, "toolu_001", "Bash"),
    json_delta(1, '{"command": "python3 -c \\"print(\'hello-from-bash\')\\"", '),
    json_delta(1, '"description": "Say hello"}'),
    assistant("msg_mock_1", tool_use("toolu_001", "Bash", BASH_INPUT)),
    block_stop(1),
    can_use_tool("toolu_001"),
    message_delta("tool_use"),
    message_stop(),
    user(tool_result_block("toolu_001", "hello-from-bash")),
    message_start("msg_mock_2"),
    text_start(0),
    text_delta(0, "It printed hello."),
    assistant("msg_mock_2", text("It printed hello.")),
    block_stop(0),
    message_delta("end_turn"),
    message_stop(),
    result(),
    init(mode="plan"),
    message_start("msg_mock_3"),
    text_start(0),
    text_delta(0, "Again."),
    assistant("msg_mock_3", text("Again.")),
    block_stop(0),
    message_delta("end_turn"),
    message_stop(),
    result(),
]


@pytest.mark.parametrize("cut", range(len(TWO_TURNS) + 1))
def test_a_translator_recalling_the_lines_before_a_restart_goes_on_as_if_none_happened(
    cut: int,
) -> None:
    """The re-attached daemon's translator is told the lines the last one translated, then
    translates the rest: together, the events of one translator that saw everything (the
    answer's text is not sent again at its `assistant` line, no tool call or status twice)."""
    whole = Translator(DAEMON_SID)
    whole.process_restarted()  # what claude's RUNNING report does in the daemon
    expected = briefs(feed(whole, *TWO_TURNS))
    before = Translator(DAEMON_SID)
    before.process_restarted()
    head = feed(before, *TWO_TURNS[:cut])
    after = Translator(DAEMON_SID)
    after.process_restarted()
    after.recall([decode(line) for line in TWO_TURNS[:cut]], (before.status, ""))
    tail = feed(after, *TWO_TURNS[cut:])
    assert briefs(head + tail) == expected
