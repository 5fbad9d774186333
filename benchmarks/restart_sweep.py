"""The full restart sweep: the daemon restarted at every boundary of one fake-claude turn
(tests/harness/restart_sweep.py says which and how), by `daemon restart` (SIGUSR2, claude kept
under its holders) and by SIGKILL + `daemon start`; every client view (a live client that
reconnects, a replay from 0, the batched stream) compared with the same turn without a restart.

    .venv/bin/python benchmarks/restart_sweep.py

Prints "N boundaries × 2 restart kinds: all exact (S s)", or every mismatch (exit 1). The test
suite runs a sample of it (tests/faults/test_restart_sweep.py).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.restart_sweep import KINDS, all_points, sweep


async def main() -> int:
    points = all_points()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="betcode-restart-sweep-") as tmp:
        mismatches = await sweep(Path(tmp), KINDS, points)
    took = time.monotonic() - started
    for mismatch in mismatches:
        print(f"{mismatch.kind} {mismatch.point} [{mismatch.view}]: {mismatch.detail}")
    verdict = "all exact" if not mismatches else f"{len(mismatches)} mismatches"
    print(f"{len(points)} boundaries × {len(KINDS)} restart kinds: {verdict} ({took:.1f} s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
