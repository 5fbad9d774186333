"""Forwarders in front of a real server, for tests that need a connection to look or behave
otherwise (another source address, a slow greeting): `carry` moves one direction's bytes."""

from __future__ import annotations

import asyncio
import contextlib


async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every byte `reader` gives, written to `writer`, until either end closes."""
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
