"""Daemon startup refuses a missing or too-old claude with the documented exit codes."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from harness.daemon import DaemonProcess

from betcode.composition.startup_checks import EXIT_CANNOT_LISTEN
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.version import EXIT_CLAUDE_MISSING, EXIT_CLAUDE_TOO_OLD


def foreground_env(tmp_path: Path, claude_bin: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "BETCODE_CLAUDE_BIN": claude_bin,
        "BETCODE_SOCKET": str(tmp_path / "sock" / "daemon.sock"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
    }


def start_foreground(
    tmp_path: Path,
    claude_bin: str,
    *args: str,
    stdin: int | None = subprocess.DEVNULL,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground", *args],
        env={**foreground_env(tmp_path, claude_bin), **(extra_env or {})},
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_claude_exits_72_and_says_what_was_tried(tmp_path: Path) -> None:
    done = start_foreground(tmp_path, str(tmp_path / "no-such-claude"))
    assert done.returncode == EXIT_CLAUDE_MISSING
    assert "no-such-claude" in done.stderr
    assert not (tmp_path / "sock" / "daemon.sock").exists()


def test_too_old_claude_exits_78(tmp_path: Path) -> None:
    old = make_fake_claude(tmp_path / "fake", {"version": "claude v1.0.22 (anthropic-2024-12-01)"})
    done = start_foreground(tmp_path, str(old))
    assert done.returncode == EXIT_CLAUDE_TOO_OLD
    assert "1.0.22" in done.stderr


@pytest.mark.real_cli
def test_doctor_reports_the_pinned_cli(tmp_path: Path, claude_bin: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "BETCODE_CLAUDE_BIN": str(claude_bin),
        "BETCODE_CONFIG_DIR": str(tmp_path / "cfg"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert str(claude_bin) in done.stdout
    assert "2.1.330" in done.stdout
    assert "FULLY_COMPATIBLE" in done.stdout
    assert str(tmp_path / "cfg") in done.stdout
    assert str(tmp_path / "data") in done.stdout
    assert "event loop:  uvloop (the daemon's)" in done.stdout


def test_doctor_names_an_unusable_event_loop_and_exits_like_the_daemon_would(
    tmp_path: Path, claude_bin: Path
) -> None:
    env = {**foreground_env(tmp_path, str(claude_bin)), "BETCODE_EVENT_LOOP": "trio"}
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_CONFIG_INVALID
    assert "event loop:  UNUSABLE — BETCODE_EVENT_LOOP='trio' is not one of" in done.stdout
    assert "FULLY_COMPATIBLE" in done.stdout  # the rest of the report is still there


def too_old_claude(tmp_path: Path) -> str:
    """A claude the daemon refuses at its version check: the step after config and import."""
    version = {"version": "claude v1.0.22 (anthropic-2024-12-01)"}
    return str(make_fake_claude(tmp_path / "fake", version))


def write_daemon_settings(tmp_path: Path, daemon: dict[str, object]) -> Path:
    path = tmp_path / "config" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"daemon": daemon}))
    return path


def test_invalid_settings_exit_65_naming_file_key_value_and_range(tmp_path: Path) -> None:
    path = write_daemon_settings(tmp_path, {"crash_policy": {"max_crashes": 0}})
    done = start_foreground(tmp_path, too_old_claude(tmp_path))
    assert done.returncode == EXIT_CONFIG_INVALID
    assert done.stderr.strip() == (
        f"betcode daemon start: {path}: daemon.crash_policy.max_crashes: "
        "0 is out of range (allowed 1 to 20)"
    )
    assert not (tmp_path / "data").exists()  # stopped before the database


def test_a_spool_too_small_for_the_longest_line_exits_65(tmp_path: Path) -> None:
    path = write_daemon_settings(tmp_path, {"holder": {"spool_limit_bytes": 8 * 1024 * 1024}})
    done = start_foreground(tmp_path, too_old_claude(tmp_path))
    assert done.returncode == EXIT_CONFIG_INVALID
    assert done.stderr.strip() == (
        f"betcode daemon start: {path}: daemon.holder.spool_limit_bytes: 8388608 must be at "
        "least twice max_payload_bytes (10485760)"
    )
    assert not (tmp_path / "data").exists()


def test_an_unknown_event_loop_exits_65_before_anything_starts(tmp_path: Path) -> None:
    done = start_foreground(
        tmp_path, too_old_claude(tmp_path), extra_env={"BETCODE_EVENT_LOOP": "trio"}
    )
    assert done.returncode == EXIT_CONFIG_INVALID
    assert done.stderr.strip() == (
        "betcode daemon start: BETCODE_EVENT_LOOP='trio' is not one of: uvloop, asyncio"
    )
    assert not (tmp_path / "data").exists()


def test_set_flags_override_the_file_and_are_validated(tmp_path: Path) -> None:
    write_daemon_settings(tmp_path, {"crash_policy": {"max_crashes": 0}})
    fixed = start_foreground(tmp_path, too_old_claude(tmp_path), "--set", "crash_policy={}")
    assert fixed.returncode == EXIT_CLAUDE_TOO_OLD, fixed.stderr  # got past the config
    wrong = start_foreground(tmp_path, too_old_claude(tmp_path), "--set", "log_level=loud")
    assert wrong.returncode == EXIT_CONFIG_INVALID
    assert "command line: daemon.log_level" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def claude_home_with_settings(tmp_path: Path) -> str:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    text = json.dumps({"permissions": {"allow": ["Bash(git status)"]}})
    settings.write_text(text)
    return text


def test_first_run_without_a_terminal_never_asks_and_names_the_import(tmp_path: Path) -> None:
    claude_home_with_settings(tmp_path)
    done = start_foreground(tmp_path, too_old_claude(tmp_path))
    assert done.returncode == EXIT_CLAUDE_TOO_OLD  # went on to the claude check
    assert "`betcode config import`" in done.stdout
    assert (tmp_path / "config").is_dir()  # offered once only
    assert not (tmp_path / "config" / "settings.json").exists()


def start_on_a_terminal(tmp_path: Path, *args: str, answer: bytes) -> tuple[int, str]:
    """`daemon start --foreground` with a pseudo-terminal as stdin, typing `answer`."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer)
        done = start_foreground(tmp_path, too_old_claude(tmp_path), *args, stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)
    return done.returncode, done.stdout


def test_first_run_on_a_terminal_asks_and_copies_claude_settings(tmp_path: Path) -> None:
    original = claude_home_with_settings(tmp_path)
    code, output = start_on_a_terminal(tmp_path, answer=b"y\n")
    assert code == EXIT_CLAUDE_TOO_OLD
    assert "Copy these files?" in output
    assert (tmp_path / "config" / "settings.json").read_text() == original


def test_no_import_skips_the_question_even_on_a_terminal(tmp_path: Path) -> None:
    claude_home_with_settings(tmp_path)
    code, output = start_on_a_terminal(tmp_path, "--no-import", answer=b"y\n")
    assert code == EXIT_CLAUDE_TOO_OLD
    assert "First run" not in output
    assert not (tmp_path / "config").exists()


def test_a_second_daemon_on_the_same_socket_exits_69_and_names_the_first(tmp_path: Path) -> None:
    fake = make_fake_claude(tmp_path / "fake-ok", {})
    env = foreground_env(tmp_path, str(fake))
    first = DaemonProcess(tmp_path, env)
    first.start()
    try:
        second = start_foreground(tmp_path, str(fake), "--no-import")
    finally:
        assert first.stop() == 0
    assert second.returncode == EXIT_CANNOT_LISTEN
    assert "another BetCode daemon" in second.stderr
    assert "Traceback" not in second.stderr


def betcode(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_detached_start_passes_its_settings_to_the_daemon(tmp_path: Path) -> None:
    claude_home_with_settings(tmp_path)
    env = foreground_env(tmp_path, str(make_fake_claude(tmp_path / "fake-ok", {})))
    started = betcode(env, "daemon", "start", "--set", "log_level=debug")
    try:
        assert started.returncode == 0, started.stderr
        assert "daemon started" in started.stdout
        assert "`betcode config import`" in started.stdout  # offered by the command, once
    finally:
        stopped = betcode(env, "daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    log = (tmp_path / "data" / "daemon.log").read_text()
    assert '"level": "DEBUG"' in log  # the daemon process got --set log_level=debug
    assert "First run" not in log


def test_a_detached_start_exits_with_the_daemons_own_code(tmp_path: Path) -> None:
    env = foreground_env(tmp_path, str(tmp_path / "no-such-claude"))
    started = betcode(env, "daemon", "start", "--no-import")
    assert started.returncode == EXIT_CLAUDE_MISSING, started.stderr
    assert f"exited with code {EXIT_CLAUDE_MISSING} during startup" in started.stderr
