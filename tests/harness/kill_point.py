"""Run the daemon (`python kill_point.py POINT MARKER -- daemon start ...`) so that it is
SIGKILLed, with its process group, at one exact point of recording a user message whose line
holds MARKER: a crash in a window too short to hit from outside.

POINT is `before-commit` (the line is handed to the store writer, nothing of it committed) or
`after-commit` (its transaction committed, before anything else of the daemon runs). The daemon
is otherwise the real one; nothing of this is in the daemon's own code.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from betcode.cli.main import main
from betcode.storage.rows import LogRow, MessageRow
from betcode.storage.writer import OnCommitted, StoreWriter

POINTS = ("before-commit", "after-commit")


def die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def arm(point: str, marker: bytes) -> None:
    append = StoreWriter.append

    def append_then_die(
        self: StoreWriter, rows: Sequence[LogRow], on_committed: OnCommitted | None = None
    ) -> None:
        if any(
            type(row) is MessageRow and row.message_type == "user" and marker in row.payload
            for row in rows
        ):
            if point == "before-commit":
                die()
            append(self, rows, lambda ok: die())
            return
        append(self, rows, on_committed)

    StoreWriter.append = append_then_die  # type: ignore[method-assign]


if __name__ == "__main__":
    point, marker, separator, *argv = sys.argv[1:]
    if point not in POINTS or separator != "--":
        sys.exit(f"usage: kill_point.py {{{'|'.join(POINTS)}}} MARKER -- BETCODE_ARGS...")
    arm(point, marker.encode())
    sys.argv = [sys.argv[0], *argv]
    main()
