"""A permission rule that does not parse is skipped (it allows and denies nothing), and said
where people look: `daemon start` prints it, `daemon status` and `doctor` show it, and
`config check` fails on it; each names the file, the line, the rule and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.devtools.fake_claude import make_fake_claude

BROKEN = "Bash(rm -rf *"  # its `)` forgotten: it would deny nothing


def write_settings(config_dir: Path, deny: list[str]) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    settings = config_dir / "settings.json"
    rules = {"permissions": {"allow": ["Read"], "deny": deny}}
    settings.write_text(json.dumps(rules, indent=2) + "\n")
    return settings


def betcode(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "BETCODE_CLAUDE_BIN": str(make_fake_claude(tmp_path / "fake", {})),
        "BETCODE_SOCKET": str(tmp_path / "sock" / "daemon.sock"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_rule_that_does_not_parse_is_named_by_start_status_doctor_and_config_check(
    tmp_path: Path,
) -> None:
    settings = write_settings(tmp_path / "config", ["Bash(git push *)", BROKEN])
    line = settings.read_text().splitlines().index(f'      "{BROKEN}"') + 1
    said = f"{settings}:{line}: deny rule {BROKEN!r} does not parse ("
    consequence = "it allows and denies nothing"

    started = betcode(tmp_path, "daemon", "start", "--no-import")
    try:
        assert started.returncode == 0, started.stderr
        assert said in started.stderr
        assert consequence in started.stderr
        status = betcode(tmp_path, "daemon", "status")
        assert status.returncode == 0, status.stderr
        assert said in status.stdout
    finally:
        stopped = betcode(tmp_path, "daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    doctor = betcode(tmp_path, "doctor")
    assert said in doctor.stdout
    assert "rules:       1 PROBLEM(S)" in doctor.stdout
    checked = betcode(tmp_path, "config", "check")
    assert checked.returncode == EXIT_CONFIG_INVALID
    assert said in checked.stderr
    assert "`)`" in checked.stderr  # why


def test_config_check_passes_once_every_rule_parses(tmp_path: Path) -> None:
    write_settings(tmp_path / "config", ["Bash(git push *)", "Bash(rm -rf *)"])
    checked = betcode(tmp_path, "config", "check")
    assert checked.returncode == 0, checked.stderr
    assert "configuration OK" in checked.stdout
    doctor = betcode(tmp_path, "doctor")
    assert "rules:       every permission rule that applies here parses" in doctor.stdout
    started = betcode(tmp_path, "daemon", "start", "--no-import")
    try:
        assert "does not parse" not in started.stderr
    finally:
        betcode(tmp_path, "daemon", "stop")


def test_config_check_names_a_settings_file_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.json").write_text('{"permissions": {"deny": [}\n')
    checked = betcode(tmp_path, "config", "check")
    assert checked.returncode == EXIT_CONFIG_INVALID
    assert "malformed JSON at line 1" in checked.stderr
    assert checked.stderr.count("malformed JSON") == 1  # daemon settings and rules: one file
