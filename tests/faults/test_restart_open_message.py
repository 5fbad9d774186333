"""A daemon restarted while claude's message is still open (its last text delta streamed, its
`assistant` line not yet printed): the re-attached daemon knows what the message streamed, so
the answer is sent and stored once. The real CLI against the mock model (`SCN:slow` pauses
after every delta, so the restart falls in the pause after the last one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.conditions import until
from harness.daemon import Client
from harness.environment import Workspace
from harness.restarts import Restarts

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, common_pb2

WORDS = "word1 word2 word3"


def streamed_text(client: Client) -> str:
    return "".join(event.text_delta.text for event in client.of_kind("text_delta"))


@pytest.mark.real_cli
@pytest.mark.parametrize("kind", ["graceful", "kill9"])
async def test_a_restart_after_the_last_delta_shows_and_stores_the_answer_once(
    restarts: Restarts,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    kind: str,
) -> None:
    await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    writer = restarts.client("writer")
    writer.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await writer.wait_for("session_info")
    session_id = writer.session_id
    # A pause after each delta: the restart comes after the last one, before the block's end
    # (claude prints the `assistant` line only then). A graceful stop waits out its clients'
    # streams for up to 5 s, ingesting meanwhile: the pause must outlast that.
    delay = 9 if kind == "graceful" else 4
    writer.say(f'SCN:slow {{"words": 3, "delay": {delay}}}')
    await until(lambda: streamed_text(writer) == WORDS, within_s=60)
    seen = writer.sequences[-1]
    await restarts.restart(kind)

    # The live client reconnects where it was; another replays everything.
    writer = restarts.client("writer-again")
    writer.converse(agent_pb2.StartConversation(session_id=session_id, from_sequence=seen))
    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)
    await writer.wait_for("turn_complete", within_s=30)
    # The turn's last event is the IDLE after turn_complete: both views are compared once each
    # has it (the observer may otherwise hold it while the writer does not yet).
    idle = common_pb2.AGENT_STATUS_IDLE
    last = (await observer.wait_for_status(idle, after=seen)).sequence
    await writer.wait_for_sequence(last)

    assert streamed_text(observer) == WORDS  # once, not twice
    completes = [e.text_delta for e in observer.of_kind("text_delta") if e.text_delta.is_complete]
    assert [c.text for c in completes] == [""]  # the block's end, carrying no text again
    assert observer.sequences == list(range(1, len(observer.sequences) + 1))
    live_after = [e for e in writer.events if seen < e.sequence <= last]
    assert live_after == [e for e in observer.events if seen < e.sequence <= last]
