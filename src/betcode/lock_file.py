"""Exclusive ``flock`` lock files that say who holds them.

The daemon holds two for its whole life: ``<socket>.lock`` (one daemon per socket) and
``<data dir>/daemon.lock`` (one daemon per database). The kernel drops a lock when its holder
dies, so a crash never leaves a stale one; what the file says (the holder's pid, ...) is
written only once the lock is ours, so a refused newcomer never rewrites a running daemon's.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; ``content`` is what it wrote in the file."""

    def __init__(self, path: Path, content: bytes) -> None:
        super().__init__(f"{path} is locked by another process")
        self.content = content


def take_exclusive(path: Path, content: bytes) -> int:
    """Locks ``path`` (created 0600) and writes ``content`` in it; returns the descriptor to
    close when done. Raises `LockHeld` at once if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held = os.pread(fd, 4096, 0)
        os.close(fd)
        raise LockHeld(path, held) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, content, 0)
    return fd


def holder_content(path: Path) -> bytes | None:
    """What the holder of ``path``'s lock wrote, or None when no process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        # A shared lock cannot be had while the exclusive one is held. Taken for an instant
        # and given back at once: a daemon starting in that instant is refused, never harmed.
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4096, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
