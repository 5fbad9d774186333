"""The real CLI when the model API misbehaves (mock scenarios), read through the codec."""

from __future__ import annotations

import asyncio

import pytest
from harness.session import StartClaude

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.protocol import writer
from betcode.protocol.messages import AssistantMessage, StreamEvent, SystemMessage

pytestmark = pytest.mark.real_cli


async def test_rate_limit_is_retried(start_claude: StartClaude) -> None:
    session = await start_claude()
    await session.send(writer.user_message("SCN:http_429"))
    turn = await session.turn()

    [retry] = [m for m in turn.of_type(SystemMessage) if m.subtype == "api_retry"]
    assert retry.raw["error_status"] == 429
    assert not turn.result.is_error
    assert turn.result.result == "Recovered after errors."
    assert await session.finish() == 0


async def test_server_error_without_retries_ends_the_turn_as_an_api_error(
    start_claude: StartClaude,
) -> None:
    session = await start_claude(env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    await session.send(writer.user_message('SCN:http_500 {"times": 1000}'))
    turn = await session.turn()

    [synthetic] = turn.of_type(AssistantMessage)
    assert synthetic.is_api_error
    assert synthetic.api_error_status == 500
    result = turn.result
    assert (result.subtype, result.is_error, result.api_error_status) == ("success", True, 500)
    assert await session.finish() == 1  # the exit code follows the last result's is_error


async def test_midstream_error_is_replaced_by_a_non_streaming_retry(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    await session.send(writer.user_message("SCN:midstream_error"))
    turn = await session.turn()

    streamed_ids = {e.message_id for e in turn.of_type(StreamEvent) if e.message_id}
    [answer] = turn.of_type(AssistantMessage)
    assert answer.message_id not in streamed_ids  # trust assistant lines, not the deltas
    assert turn.result.result == "Recovered after a stream error."
    assert [r.body["stream"] for r in mock_api.message_requests] == [True, False]


async def test_interrupt_ends_a_stalled_request_and_the_process_goes_on(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    await session.send(writer.user_message('SCN:stall_first_byte {"seconds": 600}'))
    await asyncio.to_thread(mock_api.wait_for_message_requests, 1)
    await session.send(writer.interrupt("interrupt_1"))
    stalled = await session.turn()

    assert (stalled.result.subtype, stalled.result.terminal_reason) == (
        "error_during_execution",
        "aborted_streaming",
    )
    await session.send(writer.user_message("SCN:plain"))
    assert (await session.turn()).result.result == "Hello from the mock model."


async def test_mid_stream_stall_resumes_when_released(
    start_claude: StartClaude, mock_api: MockAnthropic
) -> None:
    session = await start_claude()
    await session.send(writer.user_message('SCN:stall_mid_stream {"seconds": 600}'))
    first_text = None
    while first_text is None:
        message = await session.next_message()
        if isinstance(message, StreamEvent) and message.delta_type == "text_delta":
            first_text = message.text
    mock_api.release_stalls()
    turn = await session.turn()

    assert first_text == "The stalled "
    assert turn.result.result == "The stalled stream finished after all."
