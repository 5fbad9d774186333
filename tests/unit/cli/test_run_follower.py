"""TurnFollower: what `betcode run` makes of a turn's events (text, approvals, exit code)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from google.protobuf.struct_pb2 import Struct

from betcode.cli.exit_codes import ExitCode, exit_code_of_error, retry_after_seconds
from betcode.cli.headless import Approver, Streams, TurnFollower, parse_allow_rules
from betcode.permissions.cost_requests import COST_LIMIT_NOT_SENT, COST_LIMIT_TOOL
from betcode.permissions.rules import InvalidRule
from betcode.storage.reconcile import INTERRUPTED_CODE
from betcode.v1 import agent_pb2

PROMPT = "do the thing"
CWD = "/work/repo"


def follower(
    output: str = "text", *, yes: bool = False, allow: tuple[str, ...] = ()
) -> TurnFollower:
    approver = Approver(yes, parse_allow_rules(allow), CWD, "/home/me")
    return TurnFollower(PROMPT, approver, Streams(io.StringIO(), io.StringIO(), output))


def out(run: TurnFollower) -> str:
    assert isinstance(run.streams.out, io.StringIO)
    return run.streams.out.getvalue()


def err(run: TurnFollower) -> str:
    assert isinstance(run.streams.err, io.StringIO)
    return run.streams.err.getvalue()


def echo(sequence: int = 10, content: str = PROMPT) -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(sequence=sequence, user_input=agent_pb2.UserInput(content=content))


def text(chunk: str, *, complete: bool = False, parent: str = "") -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(
        parent_tool_use_id=parent,
        text_delta=agent_pb2.TextDelta(text=chunk, is_complete=complete),
    )


def request(request_id: str, tool: str, **tool_input: Any) -> agent_pb2.AgentEvent:
    struct = Struct()
    struct.update(tool_input)
    return agent_pb2.AgentEvent(
        permission_request=agent_pb2.PermissionRequest(
            request_id=request_id, tool_name=tool, input=struct, tool_use_id=f"toolu_{request_id}"
        )
    )


def refused_call(tool_use_id: str, output: str) -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(
        tool_call_result=agent_pb2.ToolCallResult(tool_id=tool_use_id, output=output, is_error=True)
    )


def complete_with_denials(*tool_use_ids: str) -> agent_pb2.AgentEvent:
    denials = []
    for tool_use_id in tool_use_ids:
        denial = agent_pb2.PermissionDenial(tool_name="Bash", tool_use_id=tool_use_id)
        denial.tool_input.update({"command": f"run {tool_use_id}"})
        denials.append(denial)
    return agent_pb2.AgentEvent(
        turn_complete=agent_pb2.TurnComplete(stop_reason="end_turn", permission_denials=denials)
    )


def resolved(request_id: str, outcome: str, message: str = "") -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(
        permission_resolved=agent_pb2.PermissionResolved(
            request_id=request_id, outcome=outcome, message=message, decided_by_client_id="phone"
        )
    )


def error(
    code: str, *, sequence: int = 5, fatal: bool = False, **details: str
) -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(
        sequence=sequence,
        error=agent_pb2.ErrorEvent(
            code=code, message=f"{code} happened", is_fatal=fatal, details=details
        ),
    )


COMPLETE = agent_pb2.AgentEvent(turn_complete=agent_pb2.TurnComplete(stop_reason="end_turn"))


def feed(run: TurnFollower, *events: agent_pb2.AgentEvent) -> list[str]:
    approved: list[str] = []
    for event in events:
        approved += run.on_event(event)
    return approved


def test_events_before_the_runs_own_message_are_ignored() -> None:
    run = follower()
    feed(run, text("an earlier turn", complete=True), echo(content="someone else"), COMPLETE)
    assert (run.started, run.done, out(run)) == (False, False, "")
    feed(run, echo(), text("mine", complete=True), COMPLETE)
    assert (run.done, out(run), run.exit_code()) == (True, "mine", ExitCode.OK)


def test_text_blocks_stream_and_are_separated_and_subagent_text_is_left_out() -> None:
    run = follower()
    feed(
        run,
        echo(),
        text("Hel"),
        text("lo."),
        text("", complete=True),
        text("a subagent says", complete=True, parent="toolu_1"),
        text("Second block.", complete=True),
    )
    assert out(run) == "Hello.\n\nSecond block."
    assert run.text == "Hello.\n\nSecond block."


def test_json_output_prints_nothing_while_running_and_stream_json_prints_each_event() -> None:
    quiet = follower("json")
    feed(quiet, echo(), text("hi", complete=True))
    assert out(quiet) == ""
    streamed = follower("stream-json")
    feed(streamed, error("X", sequence=0), echo(), text("hi", complete=True))
    lines = [json.loads(line) for line in out(streamed).splitlines()]
    assert lines == [  # the refusal before our message is not part of the run's turn
        {"sequence": "10", "user_input": {"content": PROMPT}},
        {"text_delta": {"text": "hi", "is_complete": True}},
    ]


def test_a_request_waits_with_a_hint_and_a_denial_exits_3() -> None:
    run = follower()
    approved = feed(run, echo(), request("r1", "Bash", command="rm -rf build"))
    assert approved == []
    assert run.waiting == {"r1": "Bash: rm -rf build"}
    assert "betcode permissions allow r1" in err(run)
    feed(run, resolved("r1", "denied", "no"), COMPLETE)
    assert run.waiting == {}
    assert run.exit_code() == ExitCode.PERMISSION_DENIED
    assert run.summary()["denials"] == [
        {
            "request_id": "r1",
            "tool_name": "Bash",
            "outcome": "denied",
            "message": "no",
            "tool_use_id": "toolu_r1",
        }
    ]
    assert "denied by phone" in err(run)


def test_a_call_refused_without_asking_is_counted_from_the_turn_complete() -> None:
    run = follower("json")
    feed(
        run,
        echo(),
        refused_call("toolu_9", "Denied by rule: Bash(rm:*)"),
        complete_with_denials("toolu_9"),
    )
    assert run.exit_code() == ExitCode.PERMISSION_DENIED
    assert run.summary()["denials"] == [
        {
            "request_id": "",
            "tool_name": "Bash",
            "outcome": "denied",
            "message": "Denied by rule: Bash(rm:*)",
            "tool_use_id": "toolu_9",
        }
    ]
    assert "denied: Bash: run toolu_9 (Denied by rule: Bash(rm:*))" in err(run)


def test_a_denial_seen_as_resolved_and_in_the_turn_complete_counts_once() -> None:
    run = follower()
    feed(
        run,
        echo(),
        request("r1", "Bash", command="rm -rf build"),
        resolved("r1", "expired"),
        refused_call("toolu_r1", "the request expired"),
        refused_call("toolu_x", "Denied by rule: Bash(rm:*)"),
        complete_with_denials("toolu_r1", "toolu_x", "toolu_x"),
    )
    denials = run.summary()["denials"]
    assert [(d["request_id"], d["tool_use_id"], d["outcome"]) for d in denials] == [
        ("r1", "toolu_r1", "expired"),
        ("", "toolu_x", "denied"),
    ]


def test_a_turn_complete_without_denials_adds_none() -> None:
    run = follower()
    feed(run, echo(), refused_call("toolu_1", "exit code 1"), COMPLETE)
    assert (run.denials, run.exit_code()) == ([], ExitCode.OK)


def test_a_request_re_sent_after_a_reconnect_is_handled_once() -> None:
    run = follower(yes=True)
    assert feed(
        run, echo(), request("r1", "Bash", command="ls"), request("r1", "Bash", command="ls")
    ) == ["r1"]


def test_requests_left_unanswered_before_the_run_are_waited_for_or_approved() -> None:
    waits, approves = follower(), follower(allow=("Bash(ls)",))
    for run in (waits, approves):
        run.catch_up([request("r1", "Bash", command="ls"), request("r2", "Read", file_path="/a")])
        run.catch_up([resolved("r2", "allowed"), echo(content="an older message")])
    assert waits.caught_up() == []
    assert list(waits.waiting) == ["r1"]
    assert "betcode permissions allow r1" in err(waits)
    assert "r2" not in err(waits)
    assert approves.caught_up() == ["r1"]
    assert feed(approves, echo(), request("r1", "Bash", command="ls")) == []  # re-sent: once


@pytest.mark.parametrize(
    ("allow", "tool", "tool_input", "approved"),
    [
        (("Bash(git status)",), "Bash", {"command": "git status"}, True),
        (("Bash(git status)",), "Bash", {"command": "git status && rm -rf /"}, False),
        (("Bash(npm run:*)",), "Bash", {"command": "npm run build"}, True),
        (("Read",), "Bash", {"command": "ls"}, False),
        (("Edit(src/**)",), "Write", {"file_path": f"{CWD}/src/a.py"}, True),
        (("Edit(src/**)",), "Write", {"file_path": "/etc/passwd"}, False),
        ((), "Read", {"file_path": f"{CWD}/a"}, False),
    ],
)
def test_allow_rules_approve_only_what_they_cover(
    allow: tuple[str, ...], tool: str, tool_input: dict[str, object], approved: bool
) -> None:
    run = follower(allow=allow)
    assert feed(run, echo(), request("r1", tool, **tool_input)) == (["r1"] if approved else [])


def test_a_bad_allow_rule_is_refused() -> None:
    with pytest.raises(InvalidRule):
        parse_allow_rules(["Bash(unclosed"])


def test_a_cost_request_is_never_approved_even_with_yes() -> None:
    run = follower(yes=True)
    asked = request("cost-1", COST_LIMIT_TOOL, message="go on", limit_usd=1.0)
    assert feed(run, echo(), asked) == []
    assert list(run.waiting) == ["cost-1"]


def test_a_cost_request_holding_the_runs_message_waits_with_a_hint() -> None:
    # The daemon holds a message past a cost cap before echoing it: the request comes first.
    run = follower()
    asked = request("cost-1", COST_LIMIT_TOOL, message=PROMPT, limit_usd=1.0)
    asked.permission_request.description = "spent $1.20 of its $1.00 limit; allow another?"
    feed(run, asked)
    assert list(run.waiting) == ["cost-1"]
    assert f"{COST_LIMIT_TOOL}: spent $1.20 of its $1.00 limit; allow another?\n" in err(run)
    assert "betcode permissions allow cost-1" in err(run)
    feed(run, resolved("cost-1", "allowed"), echo(), text("sent", complete=True), COMPLETE)
    assert (run.done, out(run), run.exit_code()) == (True, "sent", ExitCode.OK)


def test_a_denied_cost_request_ends_the_run_with_exit_3() -> None:
    run = follower()
    feed(run, request("cost-1", COST_LIMIT_TOOL, message=PROMPT, limit_usd=1.0))
    feed(run, resolved("cost-1", "denied", "too much"), error(COST_LIMIT_NOT_SENT))
    assert (run.done, run.exit_code()) == (True, ExitCode.PERMISSION_DENIED)
    assert "COST_LIMIT_NOT_SENT happened" in err(run)


def test_a_cost_request_for_another_message_is_not_the_runs() -> None:
    run = follower()
    feed(run, request("cost-1", COST_LIMIT_TOOL, message="someone else's", limit_usd=1.0))
    feed(run, resolved("cost-1", "denied"), error(COST_LIMIT_NOT_SENT))
    assert (run.waiting, run.done, err(run)) == ({}, False, "")


def test_questions_are_never_approved_even_with_yes() -> None:
    run = follower(yes=True)
    question = agent_pb2.AgentEvent(
        user_question=agent_pb2.UserQuestion(
            question_id="q1", questions=[agent_pb2.QuestionPrompt(question="Which one?")]
        )
    )
    assert feed(run, echo(), question) == []
    assert run.waiting == {"q1": "question: Which one?"}
    assert "betcode permissions answer q1" in err(run)


def test_a_question_is_said_once_not_also_as_a_tool_call_with_its_json() -> None:
    run = follower()
    call = agent_pb2.AgentEvent(
        tool_call_start=agent_pb2.ToolCallStart(tool_id="t1", tool_name="AskUserQuestion")
    )
    call.tool_call_start.input.update({"questions": [{"question": "Which one?"}]})
    feed(run, echo(), call)
    assert err(run) == ""


@pytest.mark.parametrize(
    ("event", "code", "done"),
    [
        (error("AGENT_ERROR"), ExitCode.AGENT_ERROR, False),  # the turn still completes
        (error("AGENT_ERROR", api_error_status="429"), ExitCode.RATE_LIMITED, False),
        (error("RATE_LIMITED", fatal=True), ExitCode.RATE_LIMITED, True),
        (error("SUBPROCESS_CRASHED"), ExitCode.INTERNAL, True),
        (error("DAEMON_STOPPED"), ExitCode.CONNECTION, True),  # nothing left to wait for
        (error("SESSION_NOT_FOUND", fatal=True), ExitCode.SESSION_NOT_FOUND, True),
        (error("SQLITE_ERROR", fatal=True), ExitCode.INTERNAL, True),
    ],
)
def test_errors_map_to_exit_codes(event: agent_pb2.AgentEvent, code: ExitCode, done: bool) -> None:
    run = follower()
    feed(run, echo(), event)
    assert (run.exit_code(), run.done) == (code, done)


def test_a_daemon_stop_while_a_request_waits_leaves_the_run_waiting_for_it() -> None:
    run = follower()
    feed(run, echo(), request("r1", "Bash", command="make"), error("DAEMON_STOPPED"))
    assert (run.done, run.error, run.waiting) == (False, None, {"r1": "Bash: make"})
    assert "DAEMON_STOPPED happened; still waiting for the answer" in err(run)
    feed(run, resolved("r1", "allowed"), echo(content="[BetCode] note"), COMPLETE)
    assert (run.done, run.exit_code()) == (True, ExitCode.OK)


def test_retries_and_lost_answer_races_are_notes_not_failures() -> None:
    run = follower()
    feed(run, echo(), error("API_RETRY"), error("PERMISSION_STALE", sequence=0), COMPLETE)
    assert run.exit_code() == ExitCode.OK
    assert "API_RETRY happened" in err(run)


def test_a_refused_message_ends_the_run_before_it_starts() -> None:
    run = follower()
    feed(run, error("NO_INPUT_LOCK", sequence=0))
    assert (run.done, run.exit_code()) == (True, ExitCode.AGENT_ERROR)


def test_a_rate_limit_prints_the_documented_line() -> None:
    run = follower()
    feed(run, echo(), error("RATE_LIMITED", fatal=True, retry_after_ms="2500"))
    assert "Error: Rate limit exceeded. Retry after 3 seconds.\n" in err(run)


def test_a_cancelled_turn_exits_1() -> None:
    run = follower()
    feed(
        run,
        echo(),
        agent_pb2.AgentEvent(turn_complete=agent_pb2.TurnComplete(stop_reason="cancelled")),
    )
    assert run.exit_code() == ExitCode.AGENT_ERROR


def test_summary_carries_usage_and_cost() -> None:
    run = follower("json")
    usage = agent_pb2.UsageReport(input_tokens=3, output_tokens=5, cost_usd=0.25, model="m")
    feed(
        run,
        agent_pb2.AgentEvent(session_info=agent_pb2.SessionInfo(session_id="s1")),
        echo(),
        text("ok", complete=True),
        agent_pb2.AgentEvent(usage=usage),
        COMPLETE,
    )
    summary = run.summary()
    assert summary["session_id"] == "s1"
    assert (summary["usage"]["output_tokens"], summary["cost_usd"]) == (5, 0.25)
    assert (summary["text"], summary["error"], summary["exit_code"]) == ("ok", None, 0)


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        ("AGENT_ERROR", {}, ExitCode.AGENT_ERROR),
        ("AGENT_ERROR", {"api_error_status": "500"}, ExitCode.AGENT_ERROR),
        ("AGENT_ERROR", {"api_error_status": "429"}, ExitCode.RATE_LIMITED),
        ("RATE_LIMITED", {}, ExitCode.RATE_LIMITED),
        ("SESSION_NOT_FOUND", {}, ExitCode.SESSION_NOT_FOUND),
        ("INVALID_REQUEST", {}, ExitCode.INVALID_ARGUMENTS),
        ("MACHINE_OFFLINE", {}, ExitCode.CONNECTION),
        ("SUBPROCESS_CRASHED", {}, ExitCode.INTERNAL),
        (INTERRUPTED_CODE, {}, ExitCode.CONNECTION),  # the daemon died mid-turn
        ("DAEMON_STOPPED", {}, ExitCode.CONNECTION),  # a plain `daemon stop` mid-turn
        ("CLIENT_SILENT", {}, ExitCode.CONNECTION),
        ("SESSION_ACTIVE", {}, ExitCode.AGENT_ERROR),
        ("some_claude_code", {}, ExitCode.AGENT_ERROR),
    ],
)
def test_exit_code_of_error(code: str, details: dict[str, str], expected: ExitCode) -> None:
    assert exit_code_of_error(code, details) == expected


@pytest.mark.parametrize(
    ("details", "seconds"),
    [
        ({}, 1),
        ({"retry_after_ms": "10"}, 1),
        ({"retry_after_ms": "60000"}, 60),
        ({"retry_after_ms": "x"}, 1),
    ],
)
def test_retry_after_seconds(details: dict[str, str], seconds: int) -> None:
    assert retry_after_seconds(details) == seconds
