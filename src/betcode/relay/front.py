"""The relay's one client address: gRPC clients and browsers on the same TLS port.

grpcio can neither share a port with HTTP/1.1 nor take over an accepted socket, so the public
port is an asyncio listener that reads each connection's TLS ClientHello without consuming it
(`MSG_PEEK`) and looks at the protocols it offers (ALPN):

- a client that offers `http/1.1`, or no ALPN at all (every browser, curl, aiohttp), is handed
  to the web front (relay/web.py), which terminates TLS itself;
- a client that offers `h2` without `http/1.1` (gRPC) is spliced byte for byte to the grpcio
  server on a loopback port of its own: TLS stays end to end, grpcio terminates it.

What is not a ClientHello, a hello that does not arrive within `hello_timeout` seconds and one
larger than `MAX_HELLO_BYTES` are closed, each without holding up the others; one address
holds at most `MAX_WAITING_PER_ADDRESS` connections whose hello (or the web front's TLS
handshake) is not done, so that a slow client cannot use up the relay's file descriptors.

`SplicedPeers` keeps, for each spliced connection, the real client's address by the source
port of the splice's own loopback connection, so that AuthService counts login attempts per
real client, not all as the splicer's loopback address.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

HELLO_TIMEOUT_SECONDS = 10.0
# Real hellos are a few hundred bytes to about 2 KiB (post-quantum key shares); TLS allows one
# to span records, so this leaves room for more than one full record.
MAX_HELLO_BYTES = 32 * 1024
# A real client has a connection or two in its handshake at a time; a slow one holding many
# open would use up the relay's file descriptors.
MAX_WAITING_PER_ADDRESS = 32
HANDSHAKE_RECORD = 0x16
CLIENT_HELLO = 0x01
ALPN_EXTENSION = 16
MAX_RECORD_BYTES = 1 << 14
HTTP_1_1 = b"http/1.1"
H2 = b"h2"
# Peeking again while a hello arrives in pieces: a readable socket stays readable while the
# bytes are left in it, so the wait between peeks is a sleep, growing to the longest.
FIRST_PEEK_WAIT_SECONDS = 0.002
LONGEST_PEEK_WAIT_SECONDS = 0.05


class ListenRefused(OSError):
    """An address the relay cannot listen on (in use, not this host's, not allowed)."""


class NotClientHello(ValueError):
    """The first bytes are not a TLS ClientHello (or one too large to take)."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def take(self, count: int) -> bytes:
        if self._at + count > len(self._data):
            raise NotClientHello("the ClientHello ends inside a field")
        part = self._data[self._at : self._at + count]
        self._at += count
        return part

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> bytes:
        return self.take(self.number(length_size))

    @property
    def left(self) -> int:
        return len(self._data) - self._at


def offered_protocols(data: bytes, cap: int = MAX_HELLO_BYTES) -> list[bytes] | None:
    """The ALPN protocols a TLS ClientHello at the start of `data` offers (empty: none);
    None while the hello is incomplete. Raises NotClientHello for anything else, and for a
    hello whose handshake message is larger than `cap`."""
    handshake = bytearray()
    at = 0
    while True:
        if len(data) - at < 5:
            return None
        kind, major, length = data[at], data[at + 1], int.from_bytes(data[at + 3 : at + 5], "big")
        if kind != HANDSHAKE_RECORD or major != 3 or not 0 < length <= MAX_RECORD_BYTES:
            raise NotClientHello("not a TLS handshake record")
        if len(data) - at - 5 < length:
            return None
        handshake += data[at + 5 : at + 5 + length]
        at += 5 + length
        if len(handshake) >= 4:
            if handshake[0] != CLIENT_HELLO:
                raise NotClientHello("the first handshake message is not a ClientHello")
            size = int.from_bytes(handshake[1:4], "big")
            if size > cap:
                raise NotClientHello(f"a ClientHello of {size} bytes (at most {cap})")
            if len(handshake) >= 4 + size:
                return _alpn(bytes(handshake[4 : 4 + size]))


def _alpn(hello: bytes) -> list[bytes]:
    reader = _Reader(hello)
    reader.take(2 + 32)  # legacy_version, random
    reader.vector(1)  # legacy_session_id
    reader.vector(2)  # cipher_suites
    reader.vector(1)  # legacy_compression_methods
    if not reader.left:
        return []  # a hello without extensions (TLS 1.2 allows it)
    extensions = _Reader(reader.vector(2))
    while extensions.left:
        kind, body = extensions.number(2), extensions.vector(2)
        if kind == ALPN_EXTENSION:
            names = _Reader(_Reader(body).vector(2))
            offered = []
            while names.left:
                offered.append(names.vector(1))
            return offered
    return []


def wants_grpc(protocols: list[bytes]) -> bool:
    """gRPC clients offer h2 only; browsers offer http/1.1 (with or without h2)."""
    return H2 in protocols and HTTP_1_1 not in protocols


async def peek_protocols(sock: socket.socket, cap: int = MAX_HELLO_BYTES) -> list[bytes]:
    """The ALPN protocols of the ClientHello waiting on `sock`, left unread in it (however
    long it takes: the caller sets the time limit). Raises NotClientHello, or ConnectionError
    for a peer that leaves first."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(sock.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(sock.fileno())
    wait = FIRST_PEEK_WAIT_SECONDS
    while True:
        # The headers of the records (3 at most) and of the handshake message come on top.
        data = sock.recv(cap + 64, socket.MSG_PEEK)
        if not data:
            raise ConnectionError("the client left before its ClientHello")
        protocols = offered_protocols(data, cap)
        if protocols is not None:
            return protocols
        if len(data) >= cap + 64:
            raise NotClientHello(f"a ClientHello beyond {cap} bytes")
        await asyncio.sleep(wait)
        wait = min(wait * 2, LONGEST_PEEK_WAIT_SECONDS)


class SplicedPeers:
    """The real client address of each spliced connection, by the `ipv4:127.0.0.1:PORT` peer
    grpcio sees for it (the splice's own loopback connection)."""

    def __init__(self) -> None:
        self._real: dict[str, str] = {}

    def add(self, local_port: int, client: tuple[str, int]) -> str:
        key = f"ipv4:127.0.0.1:{local_port}"
        host = client[0]
        self._real[key] = f"ipv6:[{host}]" if ":" in host else f"ipv4:{host}"
        return key

    def remove(self, key: str) -> None:
        self._real.pop(key, None)

    def client_address(self, peer: str) -> str:
        """The address to count a caller by: the real client's for a spliced connection,
        else the peer's own, without its port (which changes per connection)."""
        return self._real.get(peer) or peer.rsplit(":", 1)[0]


class _Pipe(asyncio.Protocol):
    """One end of a splice: what it receives, the other end sends; back pressure both ways.
    `peer_key`: the SplicedPeers entry of the splice's loopback end."""

    def __init__(self, on_lost: Callable[[_Pipe], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Pipe | None = None
        self.peer_key = ""
        self.early: list[bytes] = []  # received before `_join` (asyncio may read before then)
        self.ended = False
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.other is None or self.other.transport is None:
            self.early.append(data)
        else:
            self.other.transport.write(data)

    def eof_received(self) -> bool:
        self.ended = True
        other = self.other.transport if self.other else None
        if other is not None and other.can_write_eof() and not other.is_closing():
            other.write_eof()
        return True  # the other direction may go on (a half-close)

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(self)
        self.close_both()

    def close_both(self) -> None:
        for pipe in (self, self.other):
            if pipe is not None and pipe.transport is not None:
                pipe.transport.close()


def _join(first: _Pipe, second: _Pipe) -> None:
    first.other, second.other = second, first
    if any(pipe.transport is None or pipe.transport.is_closing() for pipe in (first, second)):
        first.close_both()  # one end left while the other was being opened
        return
    for pipe in (first, second):
        for data in pipe.early:
            pipe.data_received(data)
        pipe.early.clear()
        if pipe.ended:
            pipe.eof_received()


@dataclass
class FrontDoor:
    """The public listener: `start` binds `listen`, `stop` stops accepting and closes every
    connection still open. `web` is the web front's protocol factory (aiohttp's
    `AppRunner.server`) and `web_tls` its TLS context; `grpc_port` the grpcio server's
    loopback port."""

    listen: str
    web: Callable[[], asyncio.BaseProtocol]
    web_tls: ssl.SSLContext
    grpc_port: int
    peers: SplicedPeers
    hello_timeout: float = HELLO_TIMEOUT_SECONDS
    port: int = 0

    def __post_init__(self) -> None:
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._routing: set[asyncio.Task[None]] = set()
        self._waiting: collections.Counter[str] = collections.Counter()
        self._pipes: set[_Pipe] = set()

    async def start(self) -> None:
        host, _, port = self.listen.rpartition(":")
        try:
            self._listener = socket.create_server(
                (host.strip("[]") or "127.0.0.1", int(port)),
                family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                backlog=512,
            )
        except (OSError, ValueError) as error:
            raise ListenRefused(f"cannot listen on {self.listen}: {error}") from None
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._accepting = asyncio.create_task(self._accept())

    async def _accept(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    sock, address = await loop.sock_accept(self._listener)
                except OSError as error:  # out of file descriptors, say: wait, then go on
                    log.warning("relay: cannot accept a connection: %s", error)
                    await asyncio.sleep(0.1)
                    continue
                # asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP, which an
                # accepted one is not (proto 0): without it, small answers wait for the
                # client's delayed ACK (40 ms).
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._waiting[address[0]] >= MAX_WAITING_PER_ADDRESS:
                    log.info(
                        "relay: closed a connection from %s: %d of its connections are still "
                        "in their handshake",
                        address[0],
                        MAX_WAITING_PER_ADDRESS,
                    )
                    sock.close()
                    continue
                self._waiting[address[0]] += 1  # until `_route` is done with the handshake
                task = asyncio.create_task(self._route(sock, address))
                self._routing.add(task)
                task.add_done_callback(self._routing.discard)
        finally:
            self._listener.close()

    async def _route(self, sock: socket.socket, address: tuple[str, int]) -> None:
        served = False
        try:
            async with asyncio.timeout(self.hello_timeout):
                protocols = await peek_protocols(sock)
            if wants_grpc(protocols):
                await self._splice(sock, address)
            else:
                await asyncio.get_running_loop().connect_accepted_socket(
                    self.web, sock, ssl=self.web_tls, ssl_handshake_timeout=self.hello_timeout
                )
            served = True
        except TimeoutError:
            log.info("relay: closed a connection from %s: no ClientHello in time", address[0])
        except (NotClientHello, OSError) as error:
            log.info("relay: closed a connection from %s: %s", address[0], error)
        finally:
            self._waiting[address[0]] -= 1
            if not self._waiting[address[0]]:
                del self._waiting[address[0]]
            if not served:
                sock.close()

    async def _splice(self, sock: socket.socket, address: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        upstream, client = _Pipe(self._lost), _Pipe(self._lost)
        self._pipes.update((upstream, client))
        try:
            await loop.create_connection(lambda: upstream, "127.0.0.1", self.grpc_port)
            assert upstream.transport is not None
            # Known before the first byte reaches grpcio, so before any call is counted.
            local_port = upstream.transport.get_extra_info("sockname")[1]
            upstream.peer_key = self.peers.add(local_port, address)
            await loop.connect_accepted_socket(lambda: client, sock)
        except BaseException:
            upstream.close_both()
            self._pipes.difference_update((upstream, client))
            raise
        _join(client, upstream)

    def _lost(self, pipe: _Pipe) -> None:
        self._pipes.discard(pipe)
        if pipe.peer_key:
            self.peers.remove(pipe.peer_key)

    def stop_accepting(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()

    async def stop(self) -> None:
        self.stop_accepting()
        for task in list(self._routing):
            task.cancel()
        for pipe in list(self._pipes):
            pipe.close_both()
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
