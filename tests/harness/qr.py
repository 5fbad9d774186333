"""What a command drew as a QR code in the terminal, read back as modules."""

from __future__ import annotations

import segno


def qr_modules(printed: str) -> list[list[bool]]:
    """The dark modules of a QR code printed with Unicode half blocks (light modules are
    drawn, for a dark terminal), quiet zone included."""
    halves = {" ": (True, True), "▀": (False, True), "▄": (True, False), "█": (False, False)}
    rows: list[list[bool]] = []
    for line in printed.splitlines():
        pairs = [halves[ch] for ch in line]
        rows.append([top for top, _ in pairs])
        rows.append([bottom for _, bottom in pairs])
    return rows


def draws(printed: str, text: str) -> bool:
    """Whether the printed QR code is exactly `text`'s (error correction M, as drawn)."""
    wanted = [[bool(m) for m in row] for row in segno.make(text, error="m").matrix]
    drawn = qr_modules(printed)
    border = 4
    inner = [row[border : border + len(wanted)] for row in drawn[border : border + len(wanted)]]
    return inner == wanted
