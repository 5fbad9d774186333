"""One client connection: HTTP/2 (the h2 state machine) carrying gRPC calls.

Writes are coalesced: whatever the calls queued during one event-loop turn (events of many
streams, headers, trailers, window updates) leaves in one ``transport.write``, several events
sharing one DATA frame. That is what cuts the daemon's cost per streamed event: grpc.aio sends
each message in a write of its own and waits for it before taking the next.

Every response-streaming call sends its headers as soon as it is accepted, before the handler
reads a request: a client that waits for the headers before it writes (tonic does) would
otherwise wait for ever on a bidirectional call whose server waits for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import GoAwayFrame

from betcode.server.http2.call import LOW_WATER_BYTES, ServerCall
from betcode.server.http2.wire import (
    ACCEPTED_ENCODINGS,
    DECOMPRESSORS,
    Header,
    metadata_of,
    parse_timeout,
    status_headers,
)

log = logging.getLogger(__name__)

# DATA frames are kept at HTTP/2's default maximum even when a client allows larger ones, so
# one stream's burst never holds up the others on the connection for long.
MAX_DATA_FRAME_BYTES = 16 * 1024
STREAM_WINDOW_BYTES = 1024 * 1024  # how much each request stream may send ahead
CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024
MAX_HEADER_LIST_BYTES = 16 * 1024
_PING_DATA = b"betcode!"


@dataclass(frozen=True)
class TransportSettings:
    max_message_bytes: int
    keepalive_time_s: float
    keepalive_timeout_s: float
    max_concurrent_streams: int = 1000


class Router(Protocol):
    def handler_for(self, path: str) -> grpc.RpcMethodHandler | None: ...


class GrpcConnection(asyncio.Protocol):
    def __init__(
        self,
        router: Router,
        settings: TransportSettings,
        on_lost: Callable[[GrpcConnection], None],
    ) -> None:
        self._router = router
        self._settings = settings
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._calls: dict[int, ServerCall] = {}
        self._dirty: dict[ServerCall, None] = {}  # calls with output to send, in order
        self._flush_handle: asyncio.Handle | None = None
        self._paused = False
        self._draining = False
        self.idle = asyncio.Event()  # no calls left (watched while the server drains)
        self.idle.set()
        self._last_received = self._loop.time()
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_deadline: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses, hence the cast).
        self._transport = cast(asyncio.Transport, transport)
        self._peer = _peer_name(self._transport)
        self._h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: (
                    self._settings.max_concurrent_streams
                ),
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW_BYTES,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
            },
        )
        # h2 sized its HPACK decoder's limit from its own default settings, before ours.
        self._h2.decoder.max_header_list_size = MAX_HEADER_LIST_BYTES
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW_BYTES - 65_535)
        self._transport.write(self._h2.data_to_send())
        self._arm_keepalive(self._settings.keepalive_time_s)

    def data_received(self, data: bytes) -> None:
        self._last_received = self._loop.time()
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            log.info("closing the connection from %s: %s", self._peer, error)
            self._write_pending()
            self.close()
            return
        for event in events:
            self._dispatch(event)
        self._schedule_flush()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for call in self._calls.values():
            if len(call.outbound) < LOW_WATER_BYTES:
                call.drained.set()
        self._schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for timer in (self._keepalive, self._ping_deadline, self._flush_handle):
            if timer is not None:
                timer.cancel()
        calls = list(self._calls.values())
        self._calls.clear()
        self._dirty.clear()
        for call in calls:
            call.peer_gone()
        self.idle.set()
        self._on_lost(self)

    # ---- HTTP/2 events ----

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            call = self._calls.get(event.stream_id)
            if call is not None:
                call.receive(event.data, event.flow_controlled_length)
            else:
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.RequestReceived):
            self._open_call(event.stream_id, event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            if (call := self._calls.get(event.stream_id)) is not None:
                call.end_of_requests()
        elif isinstance(event, h2.events.StreamReset):
            if (call := self._calls.pop(event.stream_id, None)) is not None:
                self._dirty.pop(call, None)
                call.peer_gone()
                self._note_idle()
        elif isinstance(event, h2.events.PingAckReceived):
            self._ping_answered()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._draining = True  # the client opens no more streams
            self._note_idle()

    def _open_call(self, stream_id: int, headers: list[Header]) -> None:
        if self._draining:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        fields = dict(headers)
        if fields.get(b":method") != b"POST":
            self._h2.send_headers(stream_id, [(b":status", b"405")], end_stream=True)
            return
        if not fields.get(b"content-type", b"").startswith(b"application/grpc"):
            self._h2.send_headers(stream_id, [(b":status", b"415")], end_stream=True)
            return
        path = fields.get(b":path", b"").decode("utf-8", "replace")
        handler = self._router.handler_for(path)
        if handler is None:
            self._refuse(stream_id, grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {path}")
            return
        encoding = fields.get(b"grpc-encoding", b"identity")
        if encoding not in DECOMPRESSORS:
            self._refuse(
                stream_id,
                grpc.StatusCode.UNIMPLEMENTED,
                f"grpc-encoding {encoding.decode('latin-1')!r} is not supported",
                [(b"grpc-accept-encoding", ACCEPTED_ENCODINGS)],
            )
            return
        timeout = fields.get(b"grpc-timeout")
        self._calls[stream_id] = ServerCall(
            self,
            stream_id,
            handler,
            metadata=metadata_of(headers),
            peer=self._peer,
            timeout=None if timeout is None else parse_timeout(timeout),
            max_message_bytes=self._settings.max_message_bytes,
            decompress=DECOMPRESSORS[encoding],
        )
        self.idle.clear()

    def _refuse(
        self,
        stream_id: int,
        code: grpc.StatusCode,
        details: str,
        extra: list[Header] | None = None,
    ) -> None:
        headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
        headers += status_headers(code, details, None) + (extra or [])
        self._h2.send_headers(stream_id, headers, end_stream=True)

    # ---- what calls ask of their connection (call.StreamChannel) ----

    @property
    def paused(self) -> bool:
        return self._paused

    def send_headers(self, stream_id: int, headers: list[Header], *, end_stream: bool) -> None:
        try:
            self._h2.send_headers(stream_id, headers, end_stream=end_stream)
        except h2.exceptions.StreamClosedError:
            return  # reset by the client meanwhile
        self._schedule_flush()

    def want_flush(self, call: ServerCall) -> None:
        if not call.closed:
            self._dirty[call] = None
            self._schedule_flush()

    def acknowledge(self, stream_id: int, size: int) -> None:
        self._h2.acknowledge_received_data(size, stream_id)
        self._schedule_flush()

    def call_done(self, call: ServerCall) -> None:
        self._dirty.pop(call, None)
        if self._calls.pop(call.stream_id, None) is not None and not call.requests_ended:
            # The status is sent; a client still sending requests is told to stop.
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                self._h2.reset_stream(call.stream_id, h2.errors.ErrorCodes.NO_ERROR)
            self._schedule_flush()
        self._note_idle()

    # ---- writing ----

    def _schedule_flush(self) -> None:
        if self._flush_handle is None and self._transport is not None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if not self._paused:
            for call in list(self._dirty):
                self._pump(call)
        self._write_pending()

    def _write_pending(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None:
            self._transport.write(data)

    def _pump(self, call: ServerCall) -> None:
        """Moves as much of the call's output into DATA frames as flow control allows, then
        its trailers once nothing else is left."""
        outbound, stream_id = call.outbound, call.stream_id
        sent = 0
        try:
            while sent < len(outbound):
                size = min(
                    self._h2.local_flow_control_window(stream_id),
                    MAX_DATA_FRAME_BYTES,
                    len(outbound) - sent,
                )
                if size <= 0:
                    break  # wait for the client's WINDOW_UPDATE
                self._h2.send_data(stream_id, bytes(outbound[sent : sent + size]))
                sent += size
            del outbound[:sent]
            if not outbound and call.trailers is not None:
                self._h2.send_headers(stream_id, call.trailers, end_stream=True)
                call.closed = True
        except h2.exceptions.StreamClosedError:
            call.peer_gone()
        if len(outbound) < LOW_WATER_BYTES:
            call.drained.set()
        if call.closed:
            self.call_done(call)
        elif not outbound:
            del self._dirty[call]

    # ---- keepalive: a client that stops answering pings is dropped ----

    def _arm_keepalive(self, delay: float) -> None:
        self._keepalive = self._loop.call_later(delay, self._keepalive_due)

    def _keepalive_due(self) -> None:
        quiet = self._loop.time() - self._last_received
        if quiet < self._settings.keepalive_time_s:
            self._arm_keepalive(self._settings.keepalive_time_s - quiet)
            return
        self._h2.ping(_PING_DATA)
        self._schedule_flush()
        self._ping_deadline = self._loop.call_later(
            self._settings.keepalive_timeout_s, self._ping_unanswered
        )

    def _ping_answered(self) -> None:
        if self._ping_deadline is not None:
            self._ping_deadline.cancel()
            self._ping_deadline = None
            self._arm_keepalive(self._settings.keepalive_time_s)

    def _ping_unanswered(self) -> None:
        log.info("%s stopped answering keepalive pings; dropping its connection", self._peer)
        if self._transport is not None:
            self._transport.abort()

    # ---- shutdown ----

    def drain(self) -> None:
        """Refuses new calls and tells the client so (GOAWAY); calls in flight go on."""
        if self._draining or self._transport is None:
            return
        self._draining = True
        self._write_pending()
        # Written beside h2, whose own GOAWAY would forbid sending anything more at all.
        goaway = GoAwayFrame(stream_id=0)
        goaway.last_stream_id = self._h2.highest_inbound_stream_id
        self._transport.write(goaway.serialize())
        self._note_idle()

    def end_calls(self, code: grpc.StatusCode, details: str) -> None:
        for call in list(self._calls.values()):
            call.end_with(code, details)

    def close(self) -> None:
        if self._transport is None:
            return
        self._h2.close_connection()
        self._write_pending()
        self._transport.close()

    def _note_idle(self) -> None:
        if not self._calls:
            self.idle.set()
            if self._draining and self._transport is not None and not self._dirty:
                self._loop.call_soon(self.close)


def _peer_name(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
    return f"unix:{transport.get_extra_info('sockname') or ''}"
