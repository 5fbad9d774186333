"""gRPC's mapping onto HTTP/2, as bytes: length-prefixed messages, timeouts, metadata, status.

Pure functions and one small parser, so the rules of the wire format (gRPC's PROTOCOL-HTTP2)
are table-tested without a connection.
"""

from __future__ import annotations

import base64
import logging
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import quote

import grpc

log = logging.getLogger(__name__)

# Each message: a compressed-flag byte and a 4-byte big-endian length, then the bytes.
MESSAGE_PREFIX = struct.Struct(">BI")

Metadata = tuple[tuple[str, str | bytes], ...]
Header = tuple[bytes, bytes]

# Headers that belong to HTTP/2 or to gRPC itself, never shown to a servicer as metadata.
_RESERVED_HEADERS = frozenset(
    {b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding"}
)
Decompress = Callable[[bytes, int], bytes]  # (payload, size limit) -> message bytes
# Connection-specific headers HTTP/2 forbids (RFC 9113, 8.2.2), and te, which only a request has.
_CONNECTION_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"}
)

_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}


class MessageTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Received message larger than max ({size} vs. {limit})")


class MessageDeframer:
    """Cuts whole messages out of the DATA one stream receives, in order."""

    def __init__(self, max_message_bytes: int) -> None:
        self._buffer = bytearray()
        self._max = max_message_bytes

    @property
    def partial(self) -> bool:
        """True while part of a message is still awaited."""
        return bool(self._buffer)

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[bool, bytes]]:
        """The messages ``data`` completes: (compressed, payload) each. Raises
        ``MessageTooLarge`` as soon as a prefix announces more than the limit."""
        buffer = self._buffer
        buffer += data
        messages: list[tuple[bool, bytes]] = []
        start = 0
        while len(buffer) - start >= MESSAGE_PREFIX.size:
            flag, size = MESSAGE_PREFIX.unpack_from(buffer, start)
            if size > self._max:
                raise MessageTooLarge(size, self._max)
            end = start + MESSAGE_PREFIX.size + size
            if len(buffer) < end:
                break
            messages.append((flag == 1, bytes(buffer[start + MESSAGE_PREFIX.size : end])))
            start = end
        del buffer[:start]
        return messages


def _inflater(window_bits: int) -> Decompress:
    def inflate(payload: bytes, limit: int) -> bytes:
        # Bounded: a small compressed message must not inflate past the size limit.
        message = zlib.decompressobj(window_bits).decompress(payload, limit + 1)
        if len(message) > limit:
            raise MessageTooLarge(len(message), limit)
        return message

    return inflate


# Request compression a client may use (grpc-encoding); responses are never compressed.
DECOMPRESSORS: dict[bytes, Decompress | None] = {
    b"identity": None,
    b"gzip": _inflater(16 + zlib.MAX_WBITS),
    b"deflate": _inflater(zlib.MAX_WBITS),
}
ACCEPTED_ENCODINGS = b",".join(DECOMPRESSORS)


def parse_timeout(value: bytes) -> float | None:
    """Seconds from a ``grpc-timeout`` value (1–8 digits and a unit), None if malformed."""
    digits, unit = value[:-1], value[-1:] or b"?"
    if not 1 <= len(digits) <= 8 or not digits.isdigit() or unit[0] not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit[0]]


def metadata_of(headers: Iterable[Header]) -> Metadata:
    """A request's custom metadata: "-bin" values decoded to bytes, the rest as text."""
    items: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name.startswith(b":") or name in _RESERVED_HEADERS:
            continue
        key = name.decode("ascii", "replace")
        if key.endswith("-bin"):
            items.append((key, _decode_binary(value)))
        else:
            items.append((key, value.decode("latin-1")))
    return tuple(items)


def _decode_binary(value: bytes) -> bytes:
    # Senders may omit the padding, and may join repeated values with commas.
    parts = value.split(b",")
    try:
        return b"".join(base64.b64decode(p + b"=" * (-len(p) % 4)) for p in parts)
    except ValueError:
        return value


def metadata_headers(metadata: Sequence[tuple[str, str | bytes]] | None) -> list[Header]:
    """A handler's metadata as headers, without what only HTTP/2 itself may send: h2's
    outbound validation would refuse those after its HPACK encoder had taken the headers before
    them, leaving the client's decoder out of step for the rest of the connection."""
    headers: list[Header] = []
    for key, value in metadata or ():
        name = key.lower().encode("ascii")
        if name.startswith(b":") or name in _CONNECTION_HEADERS:
            log.warning("metadata %r is not sent: HTTP/2 reserves it", key)
            continue
        if isinstance(value, bytes):
            headers.append((name, base64.b64encode(value).rstrip(b"=")))
        else:
            headers.append((name, value.encode("latin-1")))
    return headers


def status_headers(
    code: grpc.StatusCode, details: str | None, metadata: Sequence[tuple[str, str | bytes]] | None
) -> list[Header]:
    headers = [(b"grpc-status", str(code.value[0]).encode())]
    if details:
        headers.append((b"grpc-message", encode_status_message(details)))
    headers.extend(metadata_headers(metadata))
    return headers


def encode_status_message(details: str) -> bytes:
    """``grpc-message``: UTF-8, percent-encoding everything but printable ASCII (and '%')."""
    return quote(details, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~", encoding="utf-8").encode()
