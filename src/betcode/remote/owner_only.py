"""Files only their owner may read (keys, tokens, certificates: SEC-03/09)."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Writes a file only its owner can read (0600), created that way (never world-readable
    for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    path.chmod(0o600)
