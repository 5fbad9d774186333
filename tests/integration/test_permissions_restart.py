"""The hard case with the real CLI: a request pending when the daemon is killed with SIGKILL.

The daemon restarts; the answer comes from another terminal (`betcode permissions allow`).
The claude process that asked is long gone (at EOF it failed the request and ended its turn),
so the daemon resumes the conversation, tells claude the call was approved, and allows the
retried call once: the tool runs exactly once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harness.cli_process import betcode
from harness.daemon import Client, daemon_process_in
from harness.environment import Workspace

from betcode.devtools.mock_anthropic import MockAnthropic, Reply, ToolUseBlock
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

APPEND = "python3 -c \"print('x', file=open('counter.txt', 'a')); print('appended')\""
CALL = {"command": APPEND, "description": "Append a line"}


async def test_an_approval_after_kill_9_of_the_daemon_runs_the_tool_exactly_once(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = daemon_process_in(tmp_path, claude_bin, workspace.env(mock_api.base_url))
    await asyncio.to_thread(daemon.start)
    try:
        first = Client(daemon.socket, "first")
        first.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        first.say(f"SCN:tool_bash {json.dumps(CALL)} count once")
        request = (await first.wait_for("permission_request")).permission_request
        session_id = first.session_id
        await first.close()

        # Its holder too (test_live_restore: a claude that survives under its holder). The
        # orphaned claude sees EOF, fails the request and asks the model once more.
        await asyncio.to_thread(lambda: daemon.kill9(holders_too=True))
        await asyncio.to_thread(mock_api.wait_for_message_requests, 2, 60.0)
        # What the model does when told the call was approved: make it again.
        mock_api.enqueue(Reply(blocks=(ToolUseBlock("Bash", CALL),)))
        # DaemonProcess.start waits for the socket file: the dead daemon's must go first.
        daemon.socket.unlink()
        await asyncio.to_thread(daemon.start)

        listed = await betcode(daemon.socket, workspace.repo, "permissions", "pending", "--json")
        assert listed.code == 0, listed.err
        assert [row["request_id"] for row in json.loads(listed.out)] == [request.request_id]
        allowed = await betcode(
            daemon.socket, workspace.repo, "permissions", "allow", request.request_id
        )
        assert (allowed.code, allowed.out.strip()) == (0, f"{request.request_id}: allowed")

        watcher = Client(daemon.socket, "watcher")
        watcher.converse(agent_pb2.StartConversation(session_id=session_id))
        await watcher.wait_for("turn_complete", within_s=90)
        results = [e.tool_call_result for e in watcher.of_kind("tool_call_result")]
        await watcher.close()
        assert [r.output.strip() for r in results if not r.is_error] == ["appended"]
        assert (workspace.repo / "counter.txt").read_text() == "x\n"
        [note] = [
            e.user_input.content
            for e in watcher.of_kind("user_input")
            if e.user_input.content.startswith("[BetCode]")
        ]
        assert "the user approved" in note
        assert (
            APPEND
            in json.loads(note.split(" with input ", 1)[1].split(". It has not run")[0])["command"]
        )
        listed = await betcode(daemon.socket, workspace.repo, "permissions", "pending", "--json")
        assert listed.code == 0, listed.err
        assert json.loads(listed.out) == []
    finally:
        await asyncio.to_thread(daemon.stop)
