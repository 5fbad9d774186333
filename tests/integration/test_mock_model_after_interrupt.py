"""The mock model after an interrupted turn, with the real CLI: the next prompt in the same
session starts its own scenario, whatever the interrupt cut short."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace
from harness.session import ClaudeSession, StartClaude

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.protocol import writer
from betcode.protocol.messages import CanUseTool, ControlRequest, Result, StreamEvent
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli


async def _permission_request(session: ClaudeSession) -> CanUseTool:
    while True:
        message = await session.next_message()
        if isinstance(message, ControlRequest) and isinstance(message.request, CanUseTool):
            return message.request
        if isinstance(message, Result):
            raise AssertionError(f"the turn ended without a tool call: {message.result!r}")


async def _first_text_delta(session: ClaudeSession) -> None:
    while not (
        isinstance(message := await session.next_message(), StreamEvent)
        and message.delta_type == "text_delta"
    ):
        pass


async def _interrupt(session: ClaudeSession) -> None:
    await session.send(writer.interrupt("interrupt_1"))
    assert (await session.turn()).result.subtype == "error_during_execution"


async def test_ask_after_an_interrupted_permission_wait(start_claude: StartClaude) -> None:
    session = await start_claude()
    await session.send(writer.user_message("SCN:tool_bash"))
    assert (await _permission_request(session)).tool_name == "Bash"
    await _interrupt(session)

    await session.send(writer.user_message("SCN:ask"))
    assert (await _permission_request(session)).tool_name == "AskUserQuestion"


async def test_ask_after_an_interrupted_text_stream(start_claude: StartClaude) -> None:
    session = await start_claude()
    await session.send(writer.user_message('SCN:slow {"words": 400, "delay": 0.05}'))
    await _first_text_delta(session)
    await _interrupt(session)

    await session.send(writer.user_message("SCN:ask"))
    assert (await _permission_request(session)).tool_name == "AskUserQuestion"


async def test_plain_prompt_after_an_interrupted_stall_does_not_stall_again(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    await session.send(writer.user_message('SCN:stall_first_byte {"seconds": 600}'))
    await asyncio.to_thread(mock_api.wait_for_message_requests, 1)
    await _interrupt(session)

    await session.send(writer.user_message("hello"))
    assert (await session.turn()).result.result == "Hello from the mock model."


async def test_daemon_cancel_while_a_permission_waits_then_ask_gives_a_question(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    chat = clients("cli:ann@desk:100-aaaaaaaa")
    chat.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await chat.wait_for("session_info")
    chat.say("SCN:tool_bash")
    await chat.wait_for("permission_request")
    chat.send(agent_pb2.AgentRequest(cancel=agent_pb2.CancelRequest(reason="changed my mind")))
    await chat.wait_for("turn_complete")

    chat.say("SCN:ask")
    question = (await chat.wait_for("user_question")).user_question
    assert question.questions[0].question.startswith("Mock question 1")
