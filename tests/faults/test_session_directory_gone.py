"""A session whose working directory is gone: shown as such, refused with advice a user can
follow (never exit 7, internal error), and moved with `betcode sessions move` to another
directory, where its conversation goes on (claude resumes it: the real CLI, the mock model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from harness.environment import Workspace
from harness.restarts import Restarts

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

FIRST = 'SCN:plain {"text": "noted"} remember the word marmalade'


def said_in(body: dict[str, object]) -> str:
    """Everything the model was sent in one request's messages, as text."""
    return json.dumps(body.get("messages", []))


@pytest.mark.real_cli
async def test_a_session_whose_directory_is_gone_is_shown_refused_and_moved(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    old = workspace.root / "old_place"
    old.mkdir()
    writer = restarts.client("writer")
    writer.converse(agent_pb2.StartConversation(working_directory=str(old)))
    await writer.wait_for("session_info")
    session_id = writer.session_id
    writer.say(FIRST)
    await writer.wait_for("turn_complete", within_s=60)
    await writer.close()
    shutil.rmtree(old)

    listed = await restarts.cli("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{old} (gone)" in listed.stdout
    shown = await restarts.cli("sessions", "show", session_id)
    assert "gone: `betcode sessions move SESSION DIR`" in shown.stdout
    refused = await restarts.cli("run", "--session", session_id, "anything")
    assert refused.returncode == 1, refused.stderr  # a precondition, not an internal error
    assert "betcode sessions move" in refused.stderr + refused.stdout

    new = workspace.root / "new_place"
    new.mkdir()
    moved = await restarts.cli("sessions", "move", session_id, str(new))
    assert moved.returncode == 0, moved.stderr
    assert f"now works in {new}" in moved.stdout
    listed = await restarts.cli("sessions", "list")
    assert str(new) in listed.stdout
    assert "(gone)" not in listed.stdout

    requests_before = len(mock_api.message_requests)
    again = restarts.client("writer-again")
    again.converse(agent_pb2.StartConversation(session_id=session_id))
    again.say('SCN:plain {"text": "still here"} which word was it?')
    await again.wait_for("turn_complete", count=2, within_s=60)  # the replay has the first
    errors = [e.error.code for e in again.of_kind("error")]
    assert "CONVERSATION_LOST" not in errors  # claude resumed it from the new directory
    later = mock_api.message_requests[requests_before:]
    assert later
    assert "marmalade" in said_in(later[-1].body)  # the first turn is in claude's context
    info = again.of_kind("session_info")[-1].session_info
    assert info.working_directory == str(new)
