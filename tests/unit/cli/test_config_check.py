"""`betcode config check` fails (exit 65) on a daemon setting no setting has, naming the file
and the known key it most resembles; the daemon still only warns and ignores it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from betcode.cli.config_cmd import config_group
from betcode.daemon_config import EXIT_CONFIG_INVALID


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cfg"
    directory.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(directory))
    for name in ("BETCODE_LOG_LEVEL", "BETCODE_MAX_PAYLOAD_BYTES", "BETCODE_MAX_SESSIONS"):
        monkeypatch.delenv(name, raising=False)
    return directory


def check(config: Path, daemon: dict[str, object]) -> tuple[int, str, str]:
    (config / "settings.json").write_text(json.dumps({"daemon": daemon}))
    result = CliRunner().invoke(config_group, ["check", "--cwd", str(config)])
    return result.exit_code, result.stdout, result.stderr


def test_a_misspelt_setting_fails_the_check_with_its_file_and_the_close_key(
    config: Path,
) -> None:
    daemon = {"max_sesions": 5, "crash_policy": {"max_crashs": 2, "zzz": 1}}
    code, out, err = check(config, daemon)
    assert code == EXIT_CONFIG_INVALID
    assert "configuration OK" not in out
    path = config / "settings.json"
    lines = err.splitlines()
    assert (
        f"{path}: unknown setting daemon.max_sesions (did you mean daemon.max_sessions?)" in lines
    )
    hint = "(did you mean daemon.crash_policy.max_crashes?)"
    assert f"{path}: unknown setting daemon.crash_policy.max_crashs {hint}" in lines
    assert f"{path}: unknown setting daemon.crash_policy.zzz" in lines  # nothing close


def test_known_settings_pass_the_check(config: Path) -> None:
    code, out, err = check(config, {"max_sessions": 5, "crash_policy": {"max_crashes": 2}})
    assert code == 0, err
    assert "configuration OK" in out


def test_config_show_lists_an_unknown_setting_as_ignored(config: Path) -> None:
    check(config, {"max_sesions": 5})
    shown = CliRunner().invoke(config_group, ["show", "--cwd", str(config)])
    assert shown.exit_code == 0, shown.output
    unknown = shown.stdout.split("Unknown settings (ignored):\n", 1)[1].splitlines()
    path = config / "settings.json"
    assert (
        unknown[0]
        == f"  {path}: unknown setting daemon.max_sesions (did you mean daemon.max_sessions?)"
    )
    as_json = CliRunner().invoke(config_group, ["show", "--json", "--cwd", str(config)])
    listed = json.loads(as_json.stdout)["unknown_settings"]
    assert listed == [
        {"key": "daemon.max_sesions", "origin": str(path), "closest": "daemon.max_sessions"}
    ]
