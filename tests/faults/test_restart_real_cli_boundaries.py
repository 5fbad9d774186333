"""The real CLI against the mock model, the daemon restarted at boundaries of a turn that the
fake-claude sweep (harness/restart_sweep.py) covers too: while a permission request waits,
and between a turn's `result` and the next turn. Every client view (the live client that
reconnects, a replay from 0, the batched stream) must equal the same session's without a
restart, run first in the same daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.conditions import until
from harness.daemon import Client
from harness.environment import Workspace
from harness.restart_sweep import KINDS, client_views, compare_views, idle_after_turns, reconnect
from harness.restarts import Restarts

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, common_pb2

ALLOW = common_pb2.PERMISSION_DECISION_ALLOW_ONCE
# A command claude asks about (unlike a bare `echo`).
BASH = 'SCN:tool_bash {"command": "python3 -c \\"print(\'restarted-safely\')\\""}'


async def new_session(restarts: Restarts, workspace: Workspace) -> Client:
    client = restarts.client("writer")
    client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await client.wait_for("session_info")
    return client


async def until_idle(events: list[agent_pb2.AgentEvent] | Client, turns: int) -> None:
    await until(
        lambda: idle_after_turns(events.events if isinstance(events, Client) else events, turns),
        within_s=90,
    )


async def assert_views_equal(
    restarts: Restarts, baseline: Client, session_id: str, live: list[agent_pb2.AgentEvent]
) -> None:
    for view, events in (await client_views(restarts, session_id, live)).items():
        assert compare_views(baseline.events, events) == "", view


@pytest.mark.real_cli
@pytest.mark.parametrize("kind", KINDS)
async def test_a_restart_while_a_permission_request_waits_changes_no_client_view(
    restarts: Restarts,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    kind: str,
) -> None:
    await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    baseline = await new_session(restarts, workspace)
    baseline.say(BASH)
    request = (await baseline.wait_for("permission_request")).permission_request
    baseline.answer(request.request_id, ALLOW)
    await until_idle(baseline, 1)

    writer = await new_session(restarts, workspace)
    session_id = writer.session_id
    writer.say(BASH)
    request = (await writer.wait_for("permission_request")).permission_request
    await writer.close()
    await restarts.restart(kind)
    again = reconnect(restarts, session_id, writer)
    again.answer(request.request_id, ALLOW)
    await until(lambda: idle_after_turns(writer.events + again.events, 1), within_s=90)
    live = writer.events + again.events
    await assert_views_equal(restarts, baseline, session_id, live)
    assert "restarted-safely" in "".join(
        e.tool_call_result.output for e in live if e.HasField("tool_call_result")
    )


@pytest.mark.real_cli
@pytest.mark.parametrize("kind", KINDS)
async def test_a_restart_after_a_turns_result_changes_no_client_view_of_the_next_turn(
    restarts: Restarts,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    kind: str,
) -> None:
    await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    baseline = await new_session(restarts, workspace)
    baseline.say('SCN:plain {"text": "first"}')
    await until_idle(baseline, 1)
    baseline.say('SCN:plain {"text": "second"}')
    await until_idle(baseline, 2)

    writer = await new_session(restarts, workspace)
    session_id = writer.session_id
    writer.say('SCN:plain {"text": "first"}')
    await writer.wait_for("turn_complete")  # the `result` is stored: restart at once
    await writer.close()
    await restarts.restart(kind)
    again = reconnect(restarts, session_id, writer)
    await until(lambda: idle_after_turns(writer.events + again.events, 1), within_s=90)
    again.say('SCN:plain {"text": "second"}')  # the same claude's next turn
    await until(lambda: idle_after_turns(writer.events + again.events, 2), within_s=90)
    await assert_views_equal(restarts, baseline, session_id, writer.events + again.events)
