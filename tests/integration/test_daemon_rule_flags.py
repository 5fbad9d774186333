"""`betcode daemon start --allow/--deny/--ask RULE`: the highest permission layer, through a
real daemon running the real CLI; a flag's rule that cannot be used stops the start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness.daemon import Client, daemon_config
from harness.environment import Workspace

from betcode.cli.main import cli
from betcode.config.layers import PermissionLists
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

BASH_PROMPT = "SCN:tool_bash run it"  # the mock model asks to run python3 -c "print(...)"


async def test_a_deny_flag_applies_over_an_allow_rule_of_the_settings_file(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    config = daemon_config(
        tmp_path / "daemon",
        claude_bin,
        workspace.env(mock_api.base_url),
        rules=PermissionLists(deny=("Bash(python3:*)",)),
    )
    config.config_dir.mkdir(parents=True)
    (config.config_dir / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(python3:*)"]}})
    )
    daemon = Daemon(config)
    await daemon.start()
    client = Client(config.socket_path, "flags")
    try:
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        client.say(BASH_PROMPT)
        result = (await client.wait_for("tool_call_result")).tool_call_result
        await client.wait_for("turn_complete")
    finally:
        await client.close()
        await daemon.stop()
    # Deny is looked at before allow in every layer (Claude Code's order), so the flag's deny
    # decides without asking anyone.
    assert result.is_error
    assert "Denied by rule: Bash(python3:*)" in result.output
    assert client.of_kind("permission_request") == []


def test_a_flag_rule_that_cannot_be_used_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "daemon",
            "start",
            "--foreground",
            "--no-import",
            "--data-dir",
            str(tmp_path / "data"),
            "--socket",
            str(tmp_path / "daemon.sock"),
            "--deny",
            "Bash(git status",
        ],
        env={"BETCODE_CONFIG_DIR": str(tmp_path / "config")},
    )
    assert result.exit_code == 5, result.output
    assert "--deny" in result.output
    assert "Bash(git status" in result.output
    assert not (tmp_path / "data").exists()  # refused before anything was made
