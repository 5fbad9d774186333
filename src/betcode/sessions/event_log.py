"""A session's log: the ONLY place its sequence numbers are made.

Every line written to or read from claude gets the next line seq (``messages``); every
AgentEvent gets the next event seq (``events``), is stamped and serialized once, and the bytes
are stored and shared by every client. A batch of rows goes to the store writer in one append
and its frames are published to the session's clients only after that append committed
(ARCHITECTURE.md, "Two seq spaces, one owner" and "Publish after commit").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.observability.hooks import observer
from betcode.sessions import translate
from betcode.sessions.fanout import FanoutHub, Frame
from betcode.storage.rows import Direction, EventRow, LogRow, MessageRow
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)


class LogBatch:
    """Rows and frames recorded together: one writer append, one publish after its commit."""

    __slots__ = ("frames", "now", "rows", "stamp")

    def __init__(self) -> None:
        now_ns = time.time_ns()
        self.now = now_ns / 1e9
        self.stamp = Timestamp()
        self.stamp.FromNanoseconds(now_ns)
        self.rows: list[LogRow] = []
        self.frames: list[Frame] = []


class EventLog:
    """The seq counters of one session (seeded from SQLite), its writer and its hub."""

    def __init__(
        self,
        session_id: str,
        writer: StoreWriter,
        hub: FanoutHub,
        *,
        line_seq: int,
        event_seq: int,
    ) -> None:
        self._session_id = session_id
        self._writer = writer
        self._hub = hub
        self._line_seq = line_seq
        self._event_seq = event_seq
        self._published_seq = event_seq  # what SQLite held when the session was loaded

    @property
    def event_seq(self) -> int:
        """The seq of the last event recorded (committed or on its way)."""
        return self._event_seq

    @property
    def published_seq(self) -> int:
        """The seq of the last event handed to the session's clients (commits, and so
        publishes, happen in seq order): a client subscribed now gets every later one live."""
        return self._published_seq

    def emit(
        self,
        events: Sequence[agent_pb2.AgentEvent],
        message: MessageRow | None = None,
        on_published: Callable[[], None] | None = None,
    ) -> list[Frame]:
        """Stamps, serializes and stores events (+ their source line), publishing after commit."""
        batch = LogBatch()
        self.record(batch, events, message)
        self.commit(batch, on_published)
        return batch.frames

    def record(
        self,
        batch: LogBatch,
        events: Sequence[agent_pb2.AgentEvent],
        message: MessageRow | None,
    ) -> None:
        """Gives the events their seqs and adds them (and their source line) to `batch`."""
        rows, frames, now, stamp = batch.rows, batch.frames, batch.now, batch.stamp
        source = None
        if message is not None:
            rows.append(message)
            source = message.sequence
        for event in events:
            kind = translate.kind_of(event)  # raises before any state changes
            self._event_seq += 1
            event.sequence = self._event_seq
            event.timestamp.CopyFrom(stamp)
            data = event.SerializeToString()
            frames.append((self._event_seq, data))
            rows.append(EventRow(self._session_id, self._event_seq, source, kind, data, now))

    def commit(self, batch: LogBatch, on_published: Callable[[], None] | None = None) -> None:
        """One writer append for the whole batch; its frames are published once committed."""
        if not batch.rows:
            return
        frames = batch.frames
        appended_at = time.monotonic()

        def publish(ok: bool) -> None:
            committed_at = time.monotonic()
            if not ok:
                log.error(
                    "session %s: events %s not stored; delivered live only",
                    self._session_id,
                    [seq for seq, _ in frames],
                )
            if frames:
                self._published_seq = frames[-1][0]
            self._hub.publish(frames)
            observer().batch_stored(
                self._session_id,
                len(batch.rows),
                committed_at - appended_at,
                time.monotonic() - committed_at,
            )
            if on_published is not None:
                on_published()

        self._writer.append(batch.rows, publish)

    def message_row(self, direction: Direction, kind: str, payload: bytes) -> MessageRow:
        """The next line seq, for a line read from (out) or written to (in) claude."""
        self._line_seq += 1
        return MessageRow(self._session_id, self._line_seq, direction, kind, payload, time.time())
