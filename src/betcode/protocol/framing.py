"""Framing: raw bytes from claude's stdout → bounded NDJSON lines.

The payload limit is enforced while reading: a line longer than the limit keeps only its first
`max_line_bytes` bytes in memory and merely counts the rest, so memory stays bounded by about the
limit whatever the child writes. When the line ends, its head is cut back to valid JSON carrying
`[truncated: original_size=N bytes]` (truncation.py) and a warning is logged.

`read(chunk) + split` is the fastest way to read a pipe from asyncio, and it
cannot hit StreamReader's readline limit (pitfall 1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import msgspec

from betcode.protocol.truncation import truncate_json_line

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_MAX_PAYLOAD_BYTES = 10 * MIB
MIN_MAX_PAYLOAD_BYTES = 1 * MIB
MAX_MAX_PAYLOAD_BYTES = 100 * MIB
DEFAULT_READ_CHUNK_BYTES = 256 * 1024

_CR = 0x0D
_OPEN_BRACE = 0x7B


class PayloadLimitError(ValueError):
    """A payload limit outside 1–100 MiB was configured."""


def validate_max_payload_bytes(value: int) -> int:
    """Return `value` if it is an allowed payload limit (1 MiB to 100 MiB), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadLimitError(f"payload limit must be an integer number of bytes, got {value!r}")
    if not MIN_MAX_PAYLOAD_BYTES <= value <= MAX_MAX_PAYLOAD_BYTES:
        raise PayloadLimitError(
            f"payload limit {value} bytes is outside the allowed range "
            f"{MIN_MAX_PAYLOAD_BYTES}–{MAX_MAX_PAYLOAD_BYTES} bytes (1–100 MiB)"
        )
    return value


class Line(msgspec.Struct, frozen=True, gc=False):
    """One NDJSON line without its line terminator (a slotted, immutable record).

    `data` is the line as received, except when `truncated`: then it is the line cut to at most
    the limit, still valid JSON if the line was JSON. `original_size` counts the received bytes.
    """

    data: bytes
    original_size: int
    truncated: bool = False


class LineFramer:
    """Split a byte stream into `Line`s; feed it chunks of any size, call `finish()` at EOF.

    Blank and whitespace-only lines are skipped, a CR before the LF is removed.
    """

    __slots__ = (
        "_ends_with_cr",
        "_head_size",
        "_limit",
        "_overflow",
        "_pending",
        "_pending_size",
    )

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        self._limit = validate_max_payload_bytes(max_line_bytes)
        self._pending: list[bytes] = []  # pieces of the unfinished line (at most `_limit` bytes)
        self._pending_size = 0
        self._overflow = False  # the unfinished line is over the limit: `_pending` is its head
        self._head_size = 0  # bytes of an overflowing line kept (its head) + counted
        self._ends_with_cr = False  # the last byte of an overflowing line so far is CR

    @property
    def max_line_bytes(self) -> int:
        return self._limit

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished line held in memory (never more than `max_line_bytes`)."""
        return self._pending_size

    def feed(self, chunk: bytes) -> list[Line]:
        """Return the lines completed by `chunk`, in order."""
        parts = chunk.split(b"\n")
        rest = parts.pop()  # the bytes after the last newline start the next line
        lines: list[Line] = []
        if parts and (self._pending_size or self._overflow):
            self._add_partial(parts[0])
            line = self._take_pending()
            if line is not None:
                lines.append(line)
            parts[0] = b""
        limit = self._limit
        append = lines.append
        for part in parts:
            if not part:
                continue
            if part[-1] == _CR:
                part = part[:-1]
                if not part:
                    continue
            size = len(part)
            if size > limit:
                append(self._truncated(part[:limit], size))
            elif part[0] == _OPEN_BRACE or not part.isspace():
                append(Line(part, size, False))
        if rest:
            self._add_partial(rest)
        return lines

    def finish(self) -> list[Line]:
        """Return the last line if the stream ended without a newline; reset for reuse."""
        line = self._take_pending()
        return [] if line is None else [line]

    def _add_partial(self, piece: bytes) -> None:
        if self._overflow:
            self._head_size += len(piece)
            self._remember_trailing_cr(piece)
            return
        size = self._pending_size + len(piece)
        if size <= self._limit:
            self._pending.append(piece)
            self._pending_size = size
            return
        self._pending.append(piece)
        joined = b"".join(self._pending)
        self._pending = [joined[: self._limit]]
        self._pending_size = self._limit
        self._overflow = True
        self._head_size = size
        self._remember_trailing_cr(piece)

    def _remember_trailing_cr(self, piece: bytes) -> None:
        # A CR right before the LF is not part of the line, and it may arrive in a later
        # chunk than the head: an overflowing line remembers whether its last byte is CR.
        if piece:
            self._ends_with_cr = piece[-1] == _CR

    def _take_pending(self) -> Line | None:
        pending, overflow = self._pending, self._overflow
        ends_with_cr = overflow and self._ends_with_cr
        self._pending, self._pending_size, self._overflow = [], 0, False
        if not pending:
            return None
        if overflow:
            size = self._head_size - (1 if ends_with_cr else 0)
            head = pending[0]
            if size > self._limit:
                return self._truncated(head, size)
            data = head[:size]
        else:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            if data[-1] == _CR:
                data = data[:-1]
        if not data or (data[0] != _OPEN_BRACE and data.isspace()):
            return None
        return Line(data, len(data), False)

    def _truncated(self, head: bytes, original_size: int) -> Line:
        data = truncate_json_line(head, original_size, self._limit)
        logger.warning(
            "NDJSON line of %d bytes exceeds the payload limit of %d bytes; "
            "kept %d bytes with a truncation marker",
            original_size,
            self._limit,
            len(data),
        )
        return Line(data, original_size, True)


async def iter_line_batches(
    stream: asyncio.StreamReader,
    framer: LineFramer,
    chunk_size: int = DEFAULT_READ_CHUNK_BYTES,
) -> AsyncIterator[list[Line]]:
    """Yield the lines of each chunk read from `stream` as one batch, then the last line at EOF.

    Chunks that complete no line yield nothing.
    """
    while True:
        chunk = await stream.read(chunk_size)
        if not chunk:
            break
        lines = framer.feed(chunk)
        if lines:
            yield lines
    final = framer.finish()
    if final:
        yield final
