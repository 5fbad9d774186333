"""`betcode demo` (what `scripts/demo` runs after set-up): the real daemon, the pinned real CLI
and the mock model, end to end, with the permission prompt answered by the demo itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_cli


@pytest.mark.usefixtures("claude_bin")  # the demo runs the pinned CLI: fail if it is missing
def test_demo_reaches_an_approved_tool_call(tmp_path: Path) -> None:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "demo"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    expected = [
        '⚙ tool call Bash(python3 -c "print(6 * 7)")',
        "? permission for Bash (Multiply 6 by 7) → answering: allow once",
        "✓ tool result: 42",
        "- ok: 42",
        "▶ turn complete (end_turn)",
        "▶ daemon stopped",
    ]
    shown = [line for line in lines if line in expected]
    assert shown == expected, done.stdout
    [replay] = [line for line in lines if line.startswith("▶ replay:")]
    assert "no gap" in replay, replay  # the stored log read back is contiguous from 1
