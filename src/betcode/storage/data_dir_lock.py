"""One daemon per data dir: an exclusive lock on ``<data dir>/daemon.lock``.

Two daemons on one data dir would be two writers on one ``daemon.db``, and the second one's
startup reconciliation would idle the first one's live sessions. So the lock is taken before
the database is opened and held for the daemon's life. The file names the holder (pid and
socket) so that a refused second daemon can say which one runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from betcode.lock_file import LockHeld, holder_content, take_exclusive

LOCK_FILE_NAME = "daemon.lock"


class DataDirInUse(Exception):
    """Another daemon holds the data dir; the message names it."""


class DataDirClaim:
    """The held lock; `release` drops it. The file stays: unlinking it would let a newcomer
    lock a fresh inode while another process still holds the old one."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def claim_data_dir(data_dir: Path, socket_path: Path) -> DataDirClaim:
    """Creates the data dir (0700) if needed and locks it, or raises `DataDirInUse`."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    facts = {"pid": os.getpid(), "socket": str(socket_path)}
    try:
        fd = take_exclusive(data_dir / LOCK_FILE_NAME, json.dumps(facts).encode())
    except LockHeld as held:
        raise DataDirInUse(
            f"another BetCode daemon ({_describe(held.content)}) is using the data dir "
            f"{data_dir}; stop it with `betcode daemon stop --socket <its socket>`, or give "
            "this one another --data-dir"
        ) from None
    return DataDirClaim(fd)


def _describe(content: bytes) -> str:
    try:
        facts = json.loads(content)
        return f"pid {facts['pid']}, socket {facts['socket']}"
    except (ValueError, TypeError, KeyError):
        return "pid and socket unknown"


def data_dir_holder(data_dir: Path) -> dict[str, object] | None:
    """What the daemon holding ``data_dir`` wrote in its lock (pid, socket), or None when no
    daemon runs on it (the kernel drops the lock of a killed one)."""
    content = holder_content(data_dir / LOCK_FILE_NAME)
    if content is None:
        return None
    try:
        facts = json.loads(content)
    except ValueError:
        return {}
    return facts if isinstance(facts, dict) else {}
