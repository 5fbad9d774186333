"""`betcode config show`: every daemon setting with its value and where it came from (default,
the settings file, an environment variable, a --set flag), in columns or as JSON, and the
permission rules with their files. Run for real: click's runner, and once the installed command
in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from betcode.cli.config_cmd import config_group

ENV_TIMEOUT = "environment variable BETCODE_SUBPROCESS_TIMEOUT"
DIM, RESET = "\x1b[2m", "\x1b[0m"
DAEMON: dict[str, Any] = {
    "max_sessions": 7,
    "crash_policy": {"max_crashes": 3},
    "permission": {"notify_command": ["notify-send", "BetCode", "--urgency=critical"]},
    "holder": {"unattended_seconds": "30d"},
}


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config dir whose settings.json sets some daemon keys and an invalid rule; a clean
    environment apart from one BetCode variable."""
    directory = tmp_path / "cfg"
    directory.mkdir()
    settings = {"daemon": DAEMON, "permissions": {"allow": ["Nope("]}}
    (directory / "settings.json").write_text(json.dumps(settings))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(directory))
    for name in ("BETCODE_LOG_LEVEL", "BETCODE_MAX_PAYLOAD_BYTES", "BETCODE_MAX_SESSIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BETCODE_SUBPROCESS_TIMEOUT", "2m")
    return directory


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    local = project / ".claude/settings.local.json"
    local.write_text(json.dumps({"permissions": {"deny": ["Bash(rm:*)"]}}))
    return project


def settings_rows(output: str) -> dict[str, tuple[str, str, int]]:
    """The settings table: key -> (value, origin, column where the origin starts)."""
    rows: dict[str, tuple[str, str, int]] = {}
    for line in output.splitlines():
        if not line.startswith("  daemon."):
            continue
        key, rest = line.strip().split(maxsplit=1)
        value, origin = rest.split("  ", 1)
        origin = origin.strip()
        rows[key] = (value, origin, line.index(origin, len(key) + len(value) + 2))
    return rows


def test_text_shows_each_value_with_its_origin_in_columns(config: Path, project: Path) -> None:
    file = str(config / "settings.json")
    args = ["show", "--cwd", str(project), "--set", "log_level=debug"]
    result = CliRunner().invoke(config_group, args)
    assert result.exit_code == 0, result.output

    rows = settings_rows(result.output)
    assert rows["daemon.max_sessions"][:2] == ("7", file)
    assert rows["daemon.crash_policy.max_crashes"][:2] == ("3", file)
    assert rows["daemon.crash_policy.max_backoff_ms"][:2] == ("30000", "default")
    assert rows["daemon.subprocess.timeout_seconds"][:2] == ("2m", ENV_TIMEOUT)
    assert rows["daemon.log_level"][:2] == ('"debug"', "command line")
    assert rows["daemon.permission.ttl_seconds"][:2] == ("7d", "default")
    assert rows["daemon.permission.reminder_seconds"][:2] == ("1h, 1d", "default")
    assert rows["daemon.holder.spool_limit_bytes"][:2] == ("67108864", "default")
    assert rows["daemon.holder.unattended_seconds"][:2] == ("30d", file)
    # One origin column, except for values too long for the value column (the command, the
    # push contact).
    notify = rows.pop("daemon.permission.notify_command")
    assert notify[:2] == ('["notify-send", "BetCode", "--urgency=critical"]', file)
    assert rows.pop("daemon.web.push.contact")[:2] == ('"mailto:betcode@localhost"', "default")
    assert len({column for _, _, column in rows.values()}) == 1
    assert notify[2] > next(iter(rows.values()))[2]

    local = project / ".claude/settings.local.json"
    assert f"deny   Bash(rm:*)  ({local})" in result.output
    assert "Invalid rules (skipped):" in result.output
    assert "'Nope('" in result.output


def test_on_a_terminal_defaults_are_dimmed(config: Path, project: Path) -> None:
    result = CliRunner().invoke(config_group, ["show", "--cwd", str(project)], color=True)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    default = next(line for line in lines if "daemon.client_queue_size " in line)
    from_file = next(line for line in lines if "daemon.max_sessions " in line)
    assert default.startswith(DIM)
    assert default.endswith("default" + RESET)
    assert "\x1b[" not in from_file
    assert "\x1b[" not in CliRunner().invoke(config_group, ["show"]).output


def test_json_gives_value_origin_and_allowed_per_key(config: Path, project: Path) -> None:
    args = ["show", "--cwd", str(project), "--json", "--set", "crash_policy.max_crashes=9"]
    result = CliRunner().invoke(config_group, args)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    settings = shown["settings"]
    file = str(config / "settings.json")
    assert settings["daemon.max_sessions"] == {
        "value": 7,
        "origin": file,
        "allowed": "allowed 1 to 1000",
    }
    assert settings["daemon.crash_policy.max_crashes"]["value"] == 9
    assert settings["daemon.crash_policy.max_crashes"]["origin"] == "command line"
    assert settings["daemon.subprocess.timeout_seconds"]["value"] == 120.0
    assert settings["daemon.subprocess.timeout_seconds"]["origin"] == ENV_TIMEOUT
    assert (
        settings["daemon.permission.notify_command"]["value"]
        == DAEMON["permission"]["notify_command"]
    )
    assert settings["daemon.client_queue_size"]["origin"] == "default"
    local = str(project / ".claude/settings.local.json")
    assert shown["rules"] == [{"list": "deny", "rule": "Bash(rm:*)", "origin": local}]
    assert shown["invalid_rules"][0]["rule"] == "Nope("


@pytest.mark.parametrize(
    ("daemon", "environ", "flags", "fragment"),
    [
        ({"max_sessions": 0}, {}, [], "settings.json: daemon.max_sessions: 0 is out of range"),
        ({}, {"BETCODE_MAX_SESSIONS": "many"}, [],
         'environment variable BETCODE_MAX_SESSIONS: daemon.max_sessions: "many" is not a whole'),
        ({}, {}, ["--set", "nope=1"], "command line: daemon.nope: is not a daemon setting"),
        ({}, {}, ["--set", "max_sessions"], "expected KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_reported_with_its_origin(
    config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    daemon: dict[str, object],
    environ: dict[str, str],
    flags: list[str],
    fragment: str,
) -> None:
    (config / "settings.json").write_text(json.dumps({"daemon": daemon}))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(config_group, ["show", "--cwd", str(tmp_path), *flags])
    assert result.exit_code == 1
    assert fragment in result.output


def test_the_installed_command_shows_origins(config: Path, project: Path) -> None:
    env = {**os.environ, "BETCODE_MAX_PAYLOAD_BYTES": str(2 * 1024 * 1024)}
    completed = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "config", "show", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    settings = json.loads(completed.stdout)["settings"]
    origins = {key: entry["origin"] for key, entry in settings.items()}
    assert origins["daemon.max_payload_bytes"] == "environment variable BETCODE_MAX_PAYLOAD_BYTES"
    assert origins["daemon.subprocess.timeout_seconds"] == ENV_TIMEOUT
    assert origins["daemon.max_sessions"] == str(config / "settings.json")
    assert origins["daemon.log_level"] == "default"
