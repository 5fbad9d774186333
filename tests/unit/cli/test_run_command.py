"""`betcode run`: usage errors exit 5 (docs/CLI.md#exit-codes) before any daemon is contacted; a
lost daemon is waited for, then given up with exit 2."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from betcode.cli.connection import DaemonUnavailable
from betcode.cli.conversation import ConnectionChange
from betcode.cli.headless import Approver, Streams, TurnFollower
from betcode.cli.main import cli
from betcode.cli.run_cmd import RECONNECT_GIVE_UP_SECONDS, connection_changed
from betcode.permissions.engine import RuleSet


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["run", "   "], None, "the prompt is empty"),
        (["run", "-"], "\n\n", "the prompt is empty"),
        (["run", "hi", "--allow", "Bash(git status"], None, "--allow"),
        (["run", "hi", "--allow", "Bash(x) trailing"], None, "--allow"),
        (["run", "hi", "--session", "abc", "--continue"], None, "cannot be used together"),
        (["run", "hi", "--output", "yaml"], None, "'yaml' is not one of"),
        (["run", "hi", "--timeout", "-1"], None, "--timeout"),
        (["run"], None, "Missing argument 'PROMPT'"),
        (["no-such-command"], None, "No such command"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_usage_errors_exit_5(
    tmp_path: Path, args: list[str], stdin: str | None, message: str
) -> None:
    nobody = tmp_path / "nobody.sock"  # never reached: the arguments are refused first
    result = CliRunner().invoke(cli, [*args, "--socket", str(nobody)], input=stdin)
    assert result.exit_code == 5, result.output
    assert message in result.output
    assert "daemon" not in result.output


def test_a_prompt_from_stdin_goes_to_the_daemon(tmp_path: Path) -> None:
    nobody = tmp_path / "nobody.sock"
    result = CliRunner().invoke(cli, ["run", "-", "--socket", str(nobody)], input="hello\n")
    assert result.exit_code == 2  # read, then refused for want of a daemon
    assert f"no daemon socket at {nobody}" in result.output


def test_help_and_version_exit_0() -> None:
    assert CliRunner().invoke(cli, ["run", "--help"]).exit_code == 0
    assert CliRunner().invoke(cli, ["--version"]).exit_code == 0


def test_a_lost_daemon_is_waited_for_then_given_up_with_exit_2() -> None:
    streams = Streams(io.StringIO(), io.StringIO())
    follower = TurnFollower("hi", Approver(False, RuleSet(), "/", "/"), streams, session_id="s1")
    lost = ConnectionChange(connected=False, retry_in=0.1, reason="Socket closed")
    since = connection_changed(lost, None, follower, now=100.0)
    assert since == 100.0
    assert connection_changed(lost, since, follower, now=100.0 + RECONNECT_GIVE_UP_SECONDS) == 100.0
    assert connection_changed(ConnectionChange(connected=True), since, follower, now=101.0) is None
    with pytest.raises(DaemonUnavailable) as caught:
        connection_changed(lost, since, follower, now=100.1 + RECONNECT_GIVE_UP_SECONDS)
    assert caught.value.exit_code == 2
    assert "`betcode chat --session s1` follows it" in str(caught.value)
    assert isinstance(streams.err, io.StringIO)
    notes = streams.err.getvalue().splitlines()
    assert notes == [
        "betcode: lost the daemon (Socket closed); reconnecting",
        "betcode: reconnected to the daemon",
    ]
