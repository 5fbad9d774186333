"""`betcode chat` without a daemon says how to start it and exits 2 (connection failure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_chat_without_daemon_exits_2_with_a_hint(tmp_path: Path) -> None:
    env = {**os.environ, "BETCODE_SOCKET": str(tmp_path / "none.sock")}
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "chat"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "betcode daemon start" in done.stderr
