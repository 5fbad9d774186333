"""The web client's access token: `<config dir>/web-token`, mode 0600, the owner's credential.

Made at the first start with the web client on; `betcode web rotate-token` replaces it. Only
the owner's own tools send it (the CLI, scripts; as `Authorization: Bearer`); browsers get a
device credential from a one-time link instead (`devices`). Every device is made under the
token of its time, so a rotation signs every browser out too. The daemon reads the file again
whenever it changes, without a restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

TOKEN_FILE = "web-token"
TOKEN_BYTES = 32


def token_path(config_dir: Path) -> Path:
    return config_dir / TOKEN_FILE


def read_or_create_token(config_dir: Path) -> str:
    """The token, made (0600, never readable by others even for an instant) if missing."""
    path = token_path(config_dir)
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text().strip()
        if token:
            return token
    return rotate_token(config_dir)


def rotate_token(config_dir: Path) -> str:
    """A new token replaces the old one atomically (write a 0600 temp file, rename)."""
    config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    path = token_path(config_dir)
    temporary = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, f"{token}\n".encode())
        os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    return token


class TokenFile:
    """The current token as the daemon checks it: the file is re-read when it changed (a stat
    per check: cheap next to a request, and rotation needs no signal to the daemon)."""

    def __init__(self, config_dir: Path) -> None:
        self._path = token_path(config_dir)
        self._token = read_or_create_token(config_dir)
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            status = self._path.stat()
        except FileNotFoundError:
            return None
        return status.st_ino, status.st_mtime_ns

    def _current(self) -> str:
        """The token now ("" while the file is gone: nobody gets in until the next start)."""
        stamp = self._stat()
        if stamp != self._stamp:
            with contextlib.suppress(OSError):
                self._token = self._path.read_text().strip()
            self._stamp = stamp
        return "" if stamp is None else self._token

    def matches(self, candidate: str) -> bool:
        token = self._current()
        return bool(token) and secrets.compare_digest(candidate.encode(), token.encode())

    def fingerprint(self) -> str:
        """What device rows record of the token they were made under (never the token)."""
        return hashlib.sha256(self._current().encode()).hexdigest()
