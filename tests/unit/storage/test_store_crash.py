"""A writer process killed with SIGKILL mid-stream leaves a consistent database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from betcode.storage import open_database

CHILD = Path(__file__).with_name("writer_child.py")
CONFIRMED_BEFORE_KILL = 3000


def test_kill_9_mid_stream_keeps_every_committed_row_contiguous(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(path)], stdout=subprocess.PIPE, text=True
    )
    confirmed = 0
    try:
        assert child.stdout is not None
        for printed in child.stdout:
            confirmed = int(printed)
            if confirmed >= CONFIRMED_BEFORE_KILL:
                os.kill(child.pid, signal.SIGKILL)  # while it keeps appending
                break
    finally:
        child.kill()
        child.wait()
    assert confirmed >= CONFIRMED_BEFORE_KILL, "the writer process never got going"
    assert child.returncode == -signal.SIGKILL

    conn = open_database(path).connect()  # passes the integrity check
    lines = [seq for (seq,) in conn.execute("SELECT sequence FROM messages ORDER BY sequence")]
    events = [seq for (seq,) in conn.execute("SELECT sequence FROM events ORDER BY sequence")]
    conn.close()

    assert len(lines) >= confirmed  # nothing confirmed as committed was lost
    assert lines == list(range(1, len(lines) + 1))  # contiguous: no gap, no partial batch
    assert events == list(range(1, 2 * len(lines) + 1))  # every line with all its events
