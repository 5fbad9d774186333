"""Daemon startup refuses a missing or too-old claude with the documented exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.version import EXIT_CLAUDE_MISSING, EXIT_CLAUDE_TOO_OLD


def start_foreground(tmp_path: Path, claude_bin: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "BETCODE_CLAUDE_BIN": claude_bin,
        "BETCODE_SOCKET": str(tmp_path / "sock" / "daemon.sock"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
        env=env,
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
