"""Version parsing, the compatibility matrix, the real --version probe."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from betcode.protocol.version import (
    EXIT_CLAUDE_MISSING,
    EXIT_CLAUDE_TOO_OLD,
    ClaudeVersion,
    CompatibilityLevel,
    CompatibilityMatrix,
    ProbeStatus,
    parse_claude_version,
    probe_claude_version,
)
from betcode.v1 import version_pb2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.1.330 (Claude Code)", ClaudeVersion(2, 1, 330)),
        ("2.1.330 (Claude Code)\n", ClaudeVersion(2, 1, 330)),
        ("claude v1.0.22 (anthropic-2024-12-01)", ClaudeVersion(1, 0, 22, "anthropic-2024-12-01")),
        ("v2.0.0-beta.1 (Claude Code)", ClaudeVersion(2, 0, 0)),
        ("2.1.4", ClaudeVersion(2, 1, 4)),
        ("Claude Code 10.20.30", ClaudeVersion(10, 20, 30)),
        ("", None),
        ("claude 1.2", None),
        ("command not found", None),
    ],
)
def test_parse_claude_version(text: str, expected: ClaudeVersion | None) -> None:
    parsed = parse_claude_version(text)
    assert parsed == expected
    if parsed is not None and expected is not None:
        assert parsed.api_version == expected.api_version


def test_the_api_version_does_not_affect_ordering() -> None:
    assert ClaudeVersion(1, 0, 22, "anthropic-2024-12-01") == ClaudeVersion(1, 0, 22)
    assert ClaudeVersion(2, 1, 9) < ClaudeVersion(2, 1, 10) < ClaudeVersion(2, 2, 0)
    assert str(ClaudeVersion(2, 1, 330, "x")) == "2.1.330"


def test_levels_have_the_numbers_of_betcode_v1() -> None:
    for level in CompatibilityLevel:
        proto_name = "COMPATIBILITY_UNKNOWN" if level is CompatibilityLevel.UNKNOWN else level.name
        assert version_pb2.CompatibilityLevel.Value(proto_name) == level.value


@pytest.mark.parametrize(
    ("version", "level"),
    [
        (None, CompatibilityLevel.UNKNOWN),
        (ClaudeVersion(1, 0, 22), CompatibilityLevel.INCOMPATIBLE),
        (ClaudeVersion(1, 99, 99), CompatibilityLevel.INCOMPATIBLE),
        (ClaudeVersion(2, 0, 0), CompatibilityLevel.DEGRADED),
        (ClaudeVersion(2, 0, 77), CompatibilityLevel.DEGRADED),
        (ClaudeVersion(2, 1, 0), CompatibilityLevel.FULLY_COMPATIBLE),
        (ClaudeVersion(2, 1, 330), CompatibilityLevel.FULLY_COMPATIBLE),
        (ClaudeVersion(2, 1, 331), CompatibilityLevel.LIKELY_COMPATIBLE),
        (ClaudeVersion(3, 0, 0), CompatibilityLevel.LIKELY_COMPATIBLE),
    ],
)
def test_default_matrix(version: ClaudeVersion | None, level: CompatibilityLevel) -> None:
    assert CompatibilityMatrix().classify(version) is level


async def test_probe_of_the_pinned_real_cli(claude_bin: Path) -> None:
    probe = await probe_claude_version(str(claude_bin))
    assert probe.status is ProbeStatus.FOUND
    assert probe.version == ClaudeVersion(2, 1, 330)
    assert probe.level is CompatibilityLevel.FULLY_COMPATIBLE
    assert probe.output == "2.1.330 (Claude Code)"
    assert probe.exit_code is None


def fake_cli(tmp_path: Path, body: str) -> str:
    script = tmp_path / "claude"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


async def test_probe_of_an_old_cli_says_too_old(tmp_path: Path) -> None:
    probe = await probe_claude_version(
        fake_cli(tmp_path, 'echo "claude v1.0.22 (anthropic-2024-12-01)"')
    )
    assert probe.version == ClaudeVersion(1, 0, 22, "anthropic-2024-12-01")
    assert probe.level is CompatibilityLevel.INCOMPATIBLE
    assert probe.exit_code == EXIT_CLAUDE_TOO_OLD == 78
    assert "older than the minimum supported 2.0.0" in probe.message


async def test_probe_of_a_missing_cli(tmp_path: Path) -> None:
    probe = await probe_claude_version(str(tmp_path / "no-such-claude"))
    assert probe.status is ProbeStatus.MISSING
    assert probe.exit_code == EXIT_CLAUDE_MISSING == 72
    assert probe.level is CompatibilityLevel.UNKNOWN


async def test_probe_of_a_file_that_is_not_executable(tmp_path: Path) -> None:
    path = tmp_path / "claude"
    path.write_text("not a program")
    probe = await probe_claude_version(str(path))
    assert probe.status is ProbeStatus.MISSING
    assert probe.exit_code == EXIT_CLAUDE_MISSING


@pytest.mark.parametrize(
    ("body", "status", "in_message"),
    [
        ('echo "Claude Code (dev build)"', ProbeStatus.UNPARSEABLE, "printed no version"),
        ('echo "boom" >&2; exit 3', ProbeStatus.FAILED, "exited with 3: boom"),
    ],
)
async def test_probe_failures(
    tmp_path: Path, body: str, status: ProbeStatus, in_message: str
) -> None:
    probe = await probe_claude_version(fake_cli(tmp_path, body))
    assert probe.status is status
    assert in_message in probe.message
    assert probe.level is CompatibilityLevel.UNKNOWN
    assert probe.exit_code is None


async def test_probe_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    binary = fake_cli(tmp_path, f"sleep 60 & echo $! > {pid_file}; wait")
    probe = await probe_claude_version(binary, timeout=1.0)
    assert probe.status is ProbeStatus.TIMED_OUT
    assert _exits_within(int(pid_file.read_text()), seconds=10)


def _exits_within(pid: int, seconds: float) -> bool:
    """The killed child is re-parented and reaped; allow a moment for that."""
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())
