"""`betcode completion SHELL` prints click's script; the installed hook completes commands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from betcode.cli.main import cli


def test_the_bash_script_calls_back_with_betcodes_variable() -> None:
    result = CliRunner().invoke(cli, ["completion", "bash"])
    assert result.exit_code == 0
    assert "_betcode_completion()" in result.output
    assert "_BETCODE_COMPLETE=bash_complete" in result.output
    assert "complete -o nosort -F _betcode_completion betcode" in result.output


@pytest.mark.parametrize(("shell", "marker"), [("zsh", "#compdef betcode"), ("fish", "complete")])
def test_zsh_and_fish_scripts(shell: str, marker: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell])
    assert result.exit_code == 0
    assert marker in result.output
    assert f"_BETCODE_COMPLETE={shell}_complete" in result.output


def test_an_unknown_shell_is_a_usage_error() -> None:
    assert CliRunner().invoke(cli, ["completion", "tcsh"]).exit_code == 5


def complete(words: str) -> list[str]:
    """What the bash hook gets back for COMP_WORDS=words (cursor on the last word)."""
    env = dict(os.environ)
    env.update(
        {
            "_BETCODE_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_completing_sess_offers_sessions() -> None:
    assert complete("betcode sess") == ["plain,sessions"]


def test_completing_a_sub_command_of_sessions() -> None:
    assert complete("betcode sessions ") == [
        f"plain,{name}"
        for name in (
            *("adopt", "delete", "export", "grants", "limit", "list"),
            *("move", "rename", "search", "show"),
        )
    ]
