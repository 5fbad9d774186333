"""`betcode orchestrate`: its help documents every field of a plan file, and a plan file given
without a sub-command is run."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from betcode.cli.main import cli
from betcode.cli.plan_file import PLAN_FIELDS, STEP_FIELDS, STRATEGIES


def test_the_help_documents_every_plan_field() -> None:
    shown = CliRunner().invoke(cli, ["orchestrate", "--help"])
    assert shown.exit_code == 0
    assert "A plan file is JSON or YAML" in shown.output
    for field in (*PLAN_FIELDS, *STEP_FIELDS, *STRATEGIES):
        assert field in shown.output, field
    for command in ("cancel", "list", "retry", "run", "watch"):
        assert f"  {command} " in shown.output


def test_a_plan_file_alone_is_run(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    done = CliRunner().invoke(cli, ["orchestrate", str(missing)])
    assert done.exit_code == 5  # read as `orchestrate run FILE`: the file cannot be read
    assert f"cannot read {missing}" in done.stderr
