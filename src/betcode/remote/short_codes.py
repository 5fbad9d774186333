"""Short codes a person reads off one screen and may type on another: the daemon's pairing
codes and the relay's pairing tickets. Crockford's base32 (no I, L, O or U), so what is read
aloud or typed is what was shown; typed forms are taken in any case, with spaces or dashes, O
for 0 and I or L for 1."""

from __future__ import annotations

import secrets

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_READS_AS = str.maketrans({"O": "0", "I": "1", "L": "1"})


def new_code(length: int) -> str:
    """``length`` random characters: 5 bits each."""
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def normal_code(typed: str) -> str:
    """A code as typed, as it was made."""
    kept = "".join(ch for ch in typed.upper() if ch not in " -")
    return kept.translate(_READS_AS)
