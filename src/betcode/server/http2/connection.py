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
from dataclasses import dataclass, field
from typing import Protocol, cast

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from betcode.config.settings import GrpcSettings
from betcode.server.http2.call import LOW_WATER_BYTES, ServerCall
from betcode.server.http2.limits import AnnouncedSettings, Budget, Deadline, frame_unfinished
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
LINGER_SECONDS = 2.0  # after GOAWAY, how long what the client still sends is read and dropped
_PING_DATA = b"betcode!"
# What h2 raises for a stream it no longer has: reset by the client (perhaps in the same read
# as its HEADERS, h2 having taken every frame before the connection sees the first event).
_STREAM_GONE = (h2.exceptions.NoSuchStreamError, h2.exceptions.StreamIDTooLowError)


@dataclass(frozen=True)
class TransportSettings:
    max_message_bytes: int
    keepalive_time_s: float
    keepalive_timeout_s: float
    limits: GrpcSettings = field(default_factory=GrpcSettings)


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
        self._limits = limits = settings.limits
        self._on_lost = on_lost
        self._loop = loop = asyncio.get_running_loop()
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_outbound_headers=True,
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
        self._ended = False  # GOAWAY sent through h2: nothing more can be sent
        self._reading_paused = False
        self._last_accepted = 0  # the highest stream taken up: GOAWAY's last-stream-id
        self._buffered = 0  # request bytes of all calls not yet read by their handlers
        window = limits.budget_window_seconds
        self._resets = Budget(limits.max_resets_per_window, window)
        self._pings = Budget(limits.max_pings_per_window, window)
        self._settings_frames = Budget(limits.max_settings_per_window, window)
        self._idle = Deadline(loop, limits.idle_timeout_seconds, self._idle_expired)
        self._stall = Deadline(loop, limits.frame_timeout_seconds, self._stall_expired)
        self._abort_timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses, hence the cast).
        self._transport = cast(asyncio.Transport, transport)
        self._peer = _peer_name(self._transport)
        self._transport.set_write_buffer_limits(
            self._limits.write_high_water_bytes, self._limits.write_low_water_bytes
        )
        self._h2.local_settings = AnnouncedSettings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: (
                    self._limits.max_concurrent_streams
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
        now = self._loop.time()
        self._idle.start(now)
        self._stall.start(now)  # until the client's preface is in

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return  # lingering after GOAWAY
        self._last_received = now = self._loop.time()
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            # h2 has queued its GOAWAY (PROTOCOL_ERROR and the like) and sends nothing more.
            log.info("closing the connection from %s: %s", self._peer, error)
            self._ended = True
            self._hang_up()
            return
        for event in events:
            self._dispatch(event, now)
            if self.ended:
                return
        # A stall is time without a frame (or header block) completed, not time with part of
        # one pending: a busy connection's reads mostly end inside a frame.
        if events:
            self._stall.stop()
        if frame_unfinished(self._h2):
            self._stall.start(now)
        else:
            self._stall.stop()
        self._schedule_flush()

    def pause_writing(self) -> None:
        # Reading stops too: whatever the client sends next could only add to the output
        # (PING and SETTINGS acknowledgements, responses) that it does not take.
        self._paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()
        for call in self._calls.values():
            if len(call.outbound) < LOW_WATER_BYTES:
                call.drained.set()
        self._schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        timers = (self._keepalive, self._ping_deadline, self._flush_handle, self._abort_timer)
        for timer in timers:
            if timer is not None:
                timer.cancel()
        self._idle.cancel()
        self._stall.cancel()
        self._end_calls_here()
        self.idle.set()
        self._on_lost(self)

    def _end_calls_here(self) -> None:
        """The client gets nothing more: every call's handler is stopped."""
        calls = list(self._calls.values())
        self._calls.clear()
        self._dirty.clear()
        self._buffered = 0
        for call in calls:
            call.peer_gone()

    # ---- HTTP/2 events ----

    def _dispatch(self, event: h2.events.Event, now: float) -> None:
        if isinstance(event, h2.events.DataReceived):
            call = self._calls.get(event.stream_id)
            if call is not None:
                before = call.buffered_bytes
                call.receive(event.data, event.flow_controlled_length)
                self._buffered += call.buffered_bytes - before
                if self._buffered > self._limits.connection_buffer_bytes:
                    self._calm(f"more than {self._limits.connection_buffer_bytes} request bytes")
            else:
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.RequestReceived):
            with contextlib.suppress(*_STREAM_GONE):  # nothing to answer then
                self._open_call(event.stream_id, event.headers, now)
        elif isinstance(event, h2.events.StreamEnded):
            if (call := self._calls.get(event.stream_id)) is not None:
                call.end_of_requests()
        elif isinstance(event, h2.events.StreamReset):
            if (call := self._calls.get(event.stream_id)) is not None:
                self._forget(call)
                call.peer_gone()
                self._note_idle()
            if not self._resets.spend(now):
                self._calm("too many stream resets")
        elif isinstance(event, h2.events.PingReceived):
            if not self._pings.spend(now):
                self._calm("too many PINGs")
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            if not self._settings_frames.spend(now):
                self._calm("too many SETTINGS")
        elif isinstance(event, h2.events.PingAckReceived):
            self._ping_answered()
        elif isinstance(event, h2.events.ConnectionTerminated):
            # The client's GOAWAY: h2 sends nothing at all after it, so calls still open could
            # never answer; they are stopped and the connection is closed.
            self._ended = True
            self._end_calls_here()
            self._hang_up()

    def _open_call(self, stream_id: int, headers: list[Header], now: float) -> None:
        if self._draining:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        if len(self._calls) >= self._limits.max_concurrent_streams:
            # One stream over the announced limit is refused alone (the client may retry it);
            # a client that keeps doing so spends its reset budget.
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            if not self._resets.spend(now):
                self._calm("too many streams over the limit")
            return
        self._last_accepted = stream_id
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
        self._idle.stop()

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

    @property
    def ended(self) -> bool:
        """GOAWAY is sent (by the connection or by h2): nothing more goes out."""
        return self._ended

    @property
    def unsent_bytes(self) -> int:
        """Output written but not yet taken by the socket (h2's own is written each turn)."""
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    # ---- what calls ask of their connection (call.StreamChannel) ----

    @property
    def paused(self) -> bool:
        return self._paused

    def send_headers(self, stream_id: int, headers: list[Header], *, end_stream: bool) -> None:
        if self._ended:
            return
        try:
            self._h2.send_headers(stream_id, headers, end_stream=end_stream)
        except _STREAM_GONE:
            return  # reset by the client meanwhile
        self._schedule_flush()

    def want_flush(self, call: ServerCall) -> None:
        if not call.closed:
            self._dirty[call] = None
            self._schedule_flush()

    def acknowledge(self, stream_id: int, size: int) -> None:
        if self._ended:
            return
        self._h2.acknowledge_received_data(size, stream_id)
        self._schedule_flush()

    def consumed(self, size: int) -> None:
        self._buffered -= size

    def call_done(self, call: ServerCall) -> None:
        if self._forget(call) and not call.requests_ended and not self._ended:
            # The status is sent; a client still sending requests is told to stop.
            with contextlib.suppress(*_STREAM_GONE):
                self._h2.reset_stream(call.stream_id, h2.errors.ErrorCodes.NO_ERROR)
            self._schedule_flush()
        self._note_idle()

    def _forget(self, call: ServerCall) -> bool:
        """Takes the call off the connection; False if it was not on it."""
        self._dirty.pop(call, None)
        if self._calls.pop(call.stream_id, None) is None:
            return False
        self._buffered -= call.buffered_bytes
        return True

    # ---- writing ----

    def _schedule_flush(self) -> None:
        if self._flush_handle is None and self._transport is not None and not self._ended:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._ended:
            return
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
        except _STREAM_GONE:
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
        if self._ended:
            return
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

    # ---- limits ----

    def _calm(self, reason: str) -> None:
        log.warning("closing the connection from %s: %s", self._peer, reason)
        self._end(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, reason)

    def _idle_expired(self) -> None:
        log.debug("closing the connection from %s: idle", self._peer)
        self._end(h2.errors.ErrorCodes.NO_ERROR, "idle")

    def _stall_expired(self) -> None:
        if self._reading_paused:  # the client is not reading: that is the keepalive's case
            self._stall.start(self._loop.time())
            return
        self._calm("a preface, frame or header block left unfinished")

    # ---- shutdown ----

    def drain(self) -> None:
        """Refuses new calls (REFUSED_STREAM) and lets calls in flight go on; GOAWAY follows
        once they are done (h2 sends nothing at all after its GOAWAY)."""
        if self._draining or self._transport is None:
            return
        self._draining = True
        self._note_idle()

    def end_calls(self, code: grpc.StatusCode, details: str) -> None:
        for call in list(self._calls.values()):
            call.end_with(code, details)

    def close(self) -> None:
        self._end(h2.errors.ErrorCodes.NO_ERROR, "")

    def _end(self, code: h2.errors.ErrorCodes, reason: str) -> None:
        """GOAWAY (last-stream-id: the last stream taken up; the client may retry any later
        one elsewhere), then the connection is closed; calls still on it are stopped."""
        if self._transport is None or self._ended:
            return
        self._ended = True
        self._end_calls_here()
        self._h2.close_connection(
            code, additional_data=reason.encode() or None, last_stream_id=self._last_accepted
        )
        self._hang_up()

    def _hang_up(self) -> None:
        """Sends what is left and half-closes; what the client still sends is read and dropped
        for a moment (were the socket closed at once, the client's next write could lose it
        the GOAWAY still unread), then the connection is dropped."""
        transport = self._transport
        if transport is None:
            return
        self._write_pending()
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        transport.write_eof()
        self._abort_timer = self._loop.call_later(LINGER_SECONDS, transport.abort)

    def _note_idle(self) -> None:
        if not self._calls:
            self.idle.set()
            self._idle.start(self._loop.time())
            if self._draining and self._transport is not None and not self._dirty:
                self._loop.call_soon(self.close)


def _peer_name(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
    return f"unix:{transport.get_extra_info('sockname') or ''}"
