"""`betcode sessions adopt`: a conversation made by the real CLI run directly (not through
BetCode) is listed, adopted with its history (shown by export and found by search), and
continued: claude resumes it, so the earlier messages reach the model."""

from __future__ import annotations

import json

import pytest
from harness.cli_process import betcode
from harness.daemon import InProcessDaemon
from harness.environment import Workspace
from harness.session import StartClaude

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.protocol import writer

pytestmark = pytest.mark.real_cli

FIRST_PROMPT = 'SCN:plain {"text": "The password is swordfish."} remember the password'


async def test_a_plain_claude_conversation_is_adopted_shown_and_continued(
    start_claude: StartClaude,
    daemon: InProcessDaemon,
    workspace: Workspace,
    mock_api: MockAnthropic,
) -> None:
    socket, repo = daemon.socket, workspace.repo
    direct = await start_claude()  # plain claude in the repository, as a user runs it
    await direct.send(writer.user_message(FIRST_PROMPT))
    claude_id = (await direct.turn()).result.session_id
    assert await direct.finish() == 0

    listed = json.loads((await betcode(socket, repo, "sessions", "adopt", "--json")).out)
    [found] = [c for c in listed if c["claude_session_id"] == claude_id]
    assert found["first_prompt"] == FIRST_PROMPT
    assert found["message_count"] >= 2
    assert found["session_id"] == ""

    # a unique start of its id, as the tables print it
    adopted = await betcode(socket, repo, "sessions", "adopt", claude_id[:8], "--json")
    assert adopted.code == 0, adopted.err
    session_id = json.loads(adopted.out)["session_id"]
    exported = await betcode(socket, repo, "sessions", "export", session_id, "--format", "json")
    said = [(e["role"], e["text"]) for e in json.loads(exported.out)["entries"]]
    assert said == [("user", FIRST_PROMPT), ("assistant", "The password is swordfish.")]
    found_by_search = await betcode(socket, repo, "sessions", "search", "swordfish", "--json")
    assert {hit["session_id"] for hit in json.loads(found_by_search.out)} == {session_id}
    twice = await betcode(socket, repo, "sessions", "adopt", claude_id)
    assert twice.code == 5
    assert f"is BetCode session {session_id} already" in twice.err
    unknown = await betcode(socket, repo, "sessions", "adopt", "0bad0bad-no-such")
    assert unknown.code == 6

    asked = len(mock_api.message_requests)
    ran = await betcode(
        socket, repo, "run", 'SCN:plain {"text": "It was swordfish."} what was it?',
        "--session", session_id, "--output", "json",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["session_id"] == session_id
    [request] = mock_api.message_requests[asked:][-1:]
    sent = json.dumps(request.body["messages"])
    assert "remember the password" in sent  # the earlier turn reached the model
    assert "The password is swordfish." in sent
    exported = await betcode(socket, repo, "sessions", "export", session_id, "--format", "json")
    roles = [e["role"] for e in json.loads(exported.out)["entries"] if e["role"] != "tool_call"]
    assert roles == ["user", "assistant", "user", "assistant"]
