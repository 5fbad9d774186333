"""Real CLI through the daemon: an input edited in one terminal is what every terminal, and
every replay, shows for that tool call (PermissionResolved.updated_input)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from harness.daemon import Client, Decision, InProcessDaemon
from harness.environment import Workspace

from betcode.cli.chat.model import ChatModel
from betcode.cli.chat.state import ToolBlock
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
EDITED = {"command": 'python3 -c "print(6 * 9)"', "description": "Multiply, edited"}
WATCHER = "cli:bob@laptop:7-0a1b2c3d"


def allow_with_edit(request_id: str, tool_input: dict[str, str]) -> agent_pb2.AgentRequest:
    edited = Struct()
    edited.update(tool_input)
    response = agent_pb2.PermissionResponse(
        request_id=request_id,
        decision=Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT,
        updated_input=edited,
    )
    return agent_pb2.AgentRequest(permission=response)


def shown_input(events: list[agent_pb2.AgentEvent], tool_id: str) -> dict[str, object]:
    """The input the chat of a client that received `events` shows for the tool call."""
    model = ChatModel(WATCHER)
    for event in events:
        model.apply(event)
    [block] = [
        b for b in model.blocks.values() if isinstance(b, ToolBlock) and b.tool_id == tool_id
    ]
    return block.input


async def test_an_edit_by_one_client_reaches_the_others_and_the_replay(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    holder = clients("cli:ann@desk:100-aaaaaaaa")
    holder.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await holder.wait_for("session_info")
    watcher = clients(WATCHER)
    watcher.converse(agent_pb2.StartConversation(session_id=holder.session_id))

    holder.say(TOOL_PROMPT)
    request = (await holder.wait_for("permission_request")).permission_request
    holder.send(allow_with_edit(request.request_id, EDITED))
    result = (await holder.wait_for("tool_call_result")).tool_call_result
    assert result.output.strip() == "54"  # the edited command ran
    await holder.wait_for("turn_complete")

    resolved = (await watcher.wait_for("permission_resolved")).permission_resolved
    assert resolved.request_id == request.request_id
    assert resolved.decided_by_client_id == holder.client_id
    assert MessageToDict(resolved.updated_input) == EDITED
    await watcher.wait_for("turn_complete")
    assert shown_input(watcher.events, request.tool_use_id) == EDITED

    history = clients("cli:ann@desk:200-cccccccc")
    history.resume(holder.session_id)
    replayed = (await history.wait_for("permission_resolved")).permission_resolved
    assert MessageToDict(replayed.updated_input) == EDITED
    await history.wait_for("turn_complete")
    assert shown_input(history.events, request.tool_use_id) == EDITED
