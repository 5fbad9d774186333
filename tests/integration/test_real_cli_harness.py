"""The real-CLI harness itself: a missing binary fails loudly, the CLI stays inside its
workspace, and teardown kills the whole process group (tool children included)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import psutil
import pytest
from harness import paths
from harness.environment import Workspace
from harness.session import StartClaude

from betcode.protocol import writer
from betcode.protocol.messages import ControlRequest


def test_missing_pinned_binary_names_the_setup_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(paths, "CLAUDE_BIN", tmp_path / "claude.exe")
    with pytest.raises(paths.PinnedClaudeMissingError, match="run scripts/setup"):
        paths.require_pinned_claude()


def test_environment_is_built_from_scratch(
    monkeypatch: pytest.MonkeyPatch, workspace: Workspace
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-the-developer")
    monkeypatch.setenv("SOME_DEVELOPER_SETTING", "1")
    env = workspace.env("http://127.0.0.1:9", {"CLAUDE_CODE_MAX_RETRIES": "0"})

    assert env["ANTHROPIC_API_KEY"] == "dummy"
    assert "SOME_DEVELOPER_SETTING" not in env
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    for name in ("HOME", "CLAUDE_CODE_TMPDIR", "TMPDIR", "XDG_RUNTIME_DIR"):
        assert Path(env[name]).is_relative_to(workspace.root)
    assert (workspace.repo / ".git").is_dir()


def running(processes: list[psutil.Process]) -> dict[psutil.Process, str]:
    """Those processes still running (not exited, not zombie), with their command lines."""
    found = {}
    for process in processes:
        try:
            found[process] = " ".join(process.cmdline())
        except psutil.Error:  # gone, or a zombie
            continue
    return found


@pytest.mark.real_cli
async def test_cli_stays_in_its_workspace_and_dies_with_its_tools(
    start_claude: StartClaude, workspace: Workspace
) -> None:
    session = await start_claude()
    command = 'python3 -c "import time; time.sleep(300)"'
    await session.send(writer.user_message(f"SCN:tool_bash {json.dumps({'command': command})}"))
    while not isinstance(request := await session.next_message(), ControlRequest):
        pass
    await session.send(writer.permission_allow(request.request_id))
    cli = psutil.Process(session.process.pid)
    tool = None
    async with asyncio.timeout(30):
        while tool is None:  # the process table has no change notification: poll it
            tree = [cli, *cli.children(recursive=True)]
            tool = next((p for p, line in running(tree).items() if "sleep(300)" in line), None)
            await asyncio.sleep(0.05)
    assert os.getpgid(tool.pid) != cli.pid, "2.1.330 runs tools in a process group of their own"

    await session.process.kill()

    assert running(tree) == {}
    assert any(workspace.tmp.iterdir()), "the CLI's temp files land in the workspace"
    assert (workspace.runtime / "cc-socks").is_dir(), "its socket too"
