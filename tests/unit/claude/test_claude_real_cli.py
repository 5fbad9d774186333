"""Smoke test of the subprocess layer with the pinned real Claude Code CLI: found by locate,
`--version` answered, and a process spawned with BetCode's argv and allowlisted environment
answers `initialize` (no model call is made, so a closed loopback port is enough)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import pytest

from betcode.claude.command import build_argv
from betcode.claude.environment import build_child_env
from betcode.claude.locate import PROJECT_ROOT, BinarySource, find_claude_binary
from betcode.claude.process import ClaudeProcess
from betcode.protocol.framing import Line
from betcode.protocol.version import probe_claude_version

pytestmark = pytest.mark.real_cli

INITIALIZE = (
    b'{"type":"control_request","request_id":"i1",'
    b'"request":{"subtype":"initialize","hooks":null}}\n'
)


def _closed_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pinned_version() -> str:
    manifest = json.loads((PROJECT_ROOT / "tools/claude-code/package.json").read_text())
    return str(manifest["dependencies"]["@anthropic-ai/claude-code"])


async def test_pinned_cli_is_found_and_answers_initialize(tmp_path: Path) -> None:
    # An empty PATH directory: only the pinned copy can be found (never a global claude).
    (tmp_path / "empty-bin").mkdir()
    binary = find_claude_binary(None, {"PATH": str(tmp_path / "empty-bin")})
    assert binary.source is BinarySource.PINNED
    probe = await probe_claude_version(str(binary.path), env={"PATH": "/usr/bin:/bin"})
    assert probe.output == f"{_pinned_version()} (Claude Code)"

    (tmp_path / "home").mkdir()
    (tmp_path / "repo").mkdir()
    parent = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "ANTHROPIC_API_KEY": "sk-test-dummy",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{_closed_loopback_port()}",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "UNRELATED_SECRET": "must not reach the child",
    }
    env = build_child_env(parent, tmp_path / "scratch")
    assert "UNRELATED_SECRET" not in env
    lines: list[Line] = []
    process = ClaudeProcess(lines.extend)
    await process.start(build_argv(binary), tmp_path / "repo", env)
    try:
        await process.write(INITIALIZE)
        async with asyncio.timeout(60.0):
            while not lines:
                assert not await process.exited_within(0.05), process.stderr_tail
        response = json.loads(lines[0].data)
        assert response["type"] == "control_response"
        assert response["response"]["request_id"] == "i1"
        assert response["response"]["subtype"] == "success"
        assert response["response"]["response"]["pid"] == process.pid
        process.close_stdin()  # no turn running: the CLI exits 0 at EOF
        assert await process.wait() == 0
    finally:
        await process.terminate(grace=1.0)
