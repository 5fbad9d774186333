"""The pinned real Claude Code CLI against the mock model, read and written only via the codec.

Issue 2 "must show": a text turn, a tool turn allowed, one denied, an AskUserQuestion answered,
and several turns on one process.
"""

from __future__ import annotations

import json

import pytest
from harness.environment import Workspace
from harness.session import ClaudeSession, StartClaude

from betcode.devtools.mock_anthropic import MockAnthropic, question_text
from betcode.protocol import writer
from betcode.protocol.messages import (
    AssistantMessage,
    CanUseTool,
    ControlRequest,
    ControlResponse,
    StreamEvent,
    SystemInit,
    ToolUseBlock,
    Unknown,
)

pytestmark = pytest.mark.real_cli


def allow(request: ControlRequest) -> bytes:
    return writer.permission_allow(request.request_id)


def assert_clean_stream(session: ClaudeSession) -> None:
    """Every stdout line decoded, and none into Unknown."""
    assert session.reader.stats.invalid == 0
    assert session.reader.stats.parse_errors_tolerated == 0
    assert [m for m in session.messages if isinstance(m, Unknown)] == []


async def test_text_turn(start_claude: StartClaude, workspace: Workspace) -> None:
    session = await start_claude()
    await session.send(writer.initialize("init_1"))
    await session.send(writer.user_message("Say hello. SCN:plain"))
    turn = await session.turn()

    [init_answer] = turn.of_type(ControlResponse)
    assert init_answer.request_id == "init_1"
    assert not init_answer.is_error
    [init] = turn.of_type(SystemInit)
    assert "Bash" in init.tools
    assert init.cwd == str(workspace.repo)
    deltas = [e.text for e in turn.of_type(StreamEvent) if e.delta_type == "text_delta"]
    assert len(deltas) > 1
    assert "".join(t or "" for t in deltas) == turn.assistant_text == "Hello from the mock model."
    result = turn.result
    assert (result.subtype, result.is_error) == ("success", False)
    assert result.result == "Hello from the mock model."
    assert result.usage.output_tokens > 0
    assert (result.total_cost_usd or 0.0) > 0
    assert_clean_stream(session)


async def test_bash_allowed_runs_the_tool(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    command = 'python3 -c "print(6 * 7)"'
    await session.send(writer.user_message(f"SCN:tool_bash {json.dumps({'command': command})}"))
    turn = await session.turn(allow)

    [request] = turn.permission_requests
    assert isinstance(request.request, CanUseTool)
    assert request.request.tool_name == "Bash"
    assert request.request.input["command"] == command
    [result_block] = turn.tool_results
    assert (result_block.content, result_block.is_error) == ("42", False)
    assert result_block.tool_use_id == request.request.tool_use_id
    assert turn.result.permission_denials == []
    assert "- ok: 42" in turn.assistant_text
    last_request = mock_api.message_requests[-1].body
    assert "42" in json.dumps(last_request["messages"][-1])
    assert_clean_stream(session)


async def test_bash_denied_tells_the_model_why(
    start_claude: StartClaude, workspace: Workspace
) -> None:
    session = await start_claude()
    marker = workspace.repo / "ran.txt"
    command = f"python3 -c \"open('{marker}', 'w').write('ran')\""
    await session.send(writer.user_message(f"SCN:tool_bash {json.dumps({'command': command})}"))
    turn = await session.turn(
        lambda request: writer.permission_deny(request.request_id, "Denied by the test")
    )

    [request] = turn.permission_requests
    assert isinstance(request.request, CanUseTool)
    [result_block] = turn.tool_results
    assert result_block.is_error
    assert result_block.content == "Denied by the test"
    [denial] = turn.result.permission_denials
    assert (denial.tool_name, denial.tool_input["command"]) == ("Bash", command)
    assert denial.tool_use_id == request.request.tool_use_id
    assert not marker.exists()
    assert "- error: Denied by the test" in turn.assistant_text


async def test_ask_user_question_answers_reach_the_model(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    await session.send(writer.user_message('SCN:ask {"questions": 2}'))

    def answer(request: ControlRequest) -> bytes:
        ask = request.request
        assert isinstance(ask, CanUseTool)
        assert ask.tool_name == "AskUserQuestion"
        assert ask.requires_user_interaction
        chosen = {q["question"]: q["options"][1]["label"] for q in ask.input["questions"]}
        return writer.question_answers(request.request_id, ask.input, chosen)

    turn = await session.turn(answer)

    [tool_use] = [
        b for m in turn.of_type(AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)
    ]
    assert [q["question"] for q in tool_use.input["questions"]] == [
        question_text(1),
        question_text(2),
    ]
    sent_to_model = json.dumps(mock_api.message_requests[-1].body["messages"][-1])
    for number in (1, 2):
        assert json.dumps(f'"{question_text(number)}"="Option {number}B"')[1:-1] in sent_to_model
    assert not turn.result.is_error
    assert_clean_stream(session)


async def test_several_turns_on_one_process(start_claude: StartClaude) -> None:
    session = await start_claude()
    prompts = ["SCN:plain", "SCN:tool_bash", 'SCN:plain {"text": "third turn"}']
    results = []
    for prompt in prompts:
        await session.send(writer.user_message(prompt))
        turn = await session.turn(allow)
        assert len(turn.of_type(SystemInit)) == 1  # system/init opens every turn
        results.append(turn.result)

    assert [r.result_index for r in results] == [0, 1, 2]
    assert [r.result for r in results][2] == "third turn"
    assert results[1].num_turns == 2  # one tool round trip
    costs = [r.total_cost_usd or 0.0 for r in results]
    assert costs[0] < costs[1] < costs[2]  # cumulative for the process
    assert len({r.session_id for r in results}) == 1
    assert_clean_stream(session)
