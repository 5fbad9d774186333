"""Real CLI through the daemon: several clients on one session see the same event sequence."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from harness.daemon import Client, Decision, InProcessDaemon
from harness.environment import Workspace

from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

SLOW_PROMPT = 'SCN:slow {"words": 40, "delay": 0.03} count slowly'
TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'


def sequences(client: Client) -> list[int]:
    return [event.sequence for event in client.events if event.sequence]


def wire(client: Client) -> list[bytes]:
    return [event.SerializeToString() for event in client.events if event.sequence]


async def test_two_clients_see_identical_sequences_and_a_late_joiner_gets_everything(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    first = clients("first")
    first.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await first.wait_for("session_info")
    second = clients("second")
    second.converse(agent_pb2.StartConversation(session_id=first.session_id))
    await second.wait_for("session_info")

    first.say(SLOW_PROMPT)
    await first.wait_for("text_delta", 10)  # mid-turn
    late = clients("late")
    late.converse(agent_pb2.StartConversation(session_id=first.session_id))
    for client in (first, second, late):
        await client.wait_for("turn_complete")

    final = max(sequences(first))
    for client in (second, late):
        await client.wait_for_sequence(final)
    # Every client saw a gapless run 1..N — no gap, no duplicate, even the one that joined
    # mid-turn — and exactly the same bytes for every sequence.
    for client in (first, second, late):
        seqs = [seq for seq in sequences(client) if seq <= final]
        assert seqs == list(range(1, final + 1)), client.client_id
    assert wire(first)[:final] == wire(second)[:final] == wire(late)[:final]
    text = "".join(e.text_delta.text for e in first.of_kind("text_delta"))
    assert "word40" in text


async def test_tool_turn_with_permission_answered_by_lock_holder(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    holder = clients("holder")
    holder.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await holder.wait_for("session_info")
    watcher = clients("watcher")
    watcher.converse(agent_pb2.StartConversation(session_id=holder.session_id))

    holder.say(TOOL_PROMPT)
    request = (await holder.wait_for("permission_request")).permission_request
    assert request.tool_name == "Bash"
    # The watcher does not hold the input lock: its answer is refused, nothing changes.
    watcher.answer(request.request_id, Decision.PERMISSION_DECISION_DENY, "no")
    refusal = await watcher.wait_for("error")
    assert refusal.error.code == "NO_INPUT_LOCK"
    holder.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    result = (await holder.wait_for("tool_call_result")).tool_call_result
    assert result.output.strip() == "42"
    assert not result.is_error
    await holder.wait_for("turn_complete")
    resolved = (await watcher.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome) == (request.request_id, "allowed")
