"""One BetCode session: the single owner of its sequence numbers.

Every stdout line of its claude process and every stdin line the daemon writes is recorded
(``messages``, line seq), translated into AgentEvents (``events``, event seq), committed by the
store writer, and only then published to the attached clients. Lines are processed strictly in
the order claude wrote them by one consumer task, so a permission request can be persisted
before it is shown without reordering the stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.claude.command import CommandOptions
from betcode.claude.supervisor import ClaudeSupervisor, SupervisorState
from betcode.protocol import writer as stdin
from betcode.protocol.framing import Line
from betcode.protocol.messages import (
    ControlCancelRequest,
    ControlRequest,
    Message,
    Result,
    SystemInit,
)
from betcode.protocol.reader import ProtocolReader, ReaderStats
from betcode.sessions import translate
from betcode.sessions.attach import replay_then_live
from betcode.sessions.fanout import FanoutHub, Frame
from betcode.sessions.input_lock import InputLock
from betcode.sessions.line_types import line_type
from betcode.storage import sessions as session_rows
from betcode.storage.rows import EventRow, LogRow, MessageRow
from betcode.v1 import agent_pb2, common_pb2

if TYPE_CHECKING:
    from betcode.sessions.context import SessionContext

log = logging.getLogger(__name__)

Status = common_pb2.AgentStatus

# Rows of one writer append while ingesting: a line waits at most this many rows' work before
# its commit starts, and a subscriber is offered at most about this many frames at once.
MAX_ROWS_PER_COMMIT = 256


class _LogBatch:
    """Rows and frames recorded together: one writer append, one publish after its commit."""

    __slots__ = ("frames", "now", "rows", "stamp")

    def __init__(self) -> None:
        now_ns = time.time_ns()
        self.now = now_ns / 1e9
        self.stamp = Timestamp()
        self.stamp.FromNanoseconds(now_ns)
        self.rows: list[LogRow] = []
        self.frames: list[Frame] = []


class Session:
    """A live session: its claude supervisor, translator, fan-out hub and input lock."""

    def __init__(
        self,
        record: session_rows.SessionRecord,
        context: SessionContext,
        *,
        line_seq: int,
        event_seq: int,
        allowed_tools: Sequence[str] = (),
    ) -> None:
        self.id = record.id
        self.record = record
        self._ctx = context
        self._line_seq = line_seq
        self._event_seq = event_seq
        self.hub = FanoutHub()
        self.lock = InputLock(
            context.settings.lock_transfer_seconds, context.settings.lock_idle_seconds
        )
        self._reader = ProtocolReader()
        self.translator = translate.Translator(
            session_id=record.id,
            worktree_id=record.worktree_id or "",
            is_resumed=record.claude_session_id is not None,
        )
        self.claude_session_id = record.claude_session_id
        self.turn_active = False
        self.closed = False
        self._lines: asyncio.Queue[Sequence[Line] | None] = asyncio.Queue()
        self._consumer = asyncio.create_task(self._consume(), name=f"session-{self.id}")
        self.supervisor = ClaudeSupervisor(
            context.claude_binary,
            Path(record.working_directory),
            context.child_env,
            context.process_policy,
            self,
            options=CommandOptions(model=record.model or None, allowed_tools=tuple(allowed_tools)),
        )

    # ---- sequence numbers and recording (the only place seqs are made) ----

    def emit(
        self,
        events: Sequence[agent_pb2.AgentEvent],
        message: MessageRow | None = None,
        on_published: Callable[[], None] | None = None,
    ) -> list[Frame]:
        """Stamps, serializes and stores events (+ their source line), publishing after commit."""
        batch = _LogBatch()
        self._record(batch, events, message)
        self._commit(batch, on_published)
        return batch.frames

    def _record(
        self,
        batch: _LogBatch,
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
            rows.append(EventRow(self.id, self._event_seq, source, kind, data, now))

    def _commit(self, batch: _LogBatch, on_published: Callable[[], None] | None = None) -> None:
        """One writer append for the whole batch; its frames are published once committed."""
        if not batch.rows:
            return
        frames = batch.frames

        def publish(ok: bool) -> None:
            if not ok:
                log.error(
                    "session %s: events %s not stored; delivered live only",
                    self.id,
                    [seq for seq, _ in frames],
                )
            self.hub.publish(frames)
            if on_published is not None:
                on_published()

        self._ctx.writer.append(batch.rows, publish)

    def _message_row(self, direction: str, kind: str, payload: bytes) -> MessageRow:
        self._line_seq += 1
        return MessageRow(self.id, self._line_seq, direction, kind, payload, time.time())  # type: ignore[arg-type]

    # ---- claude stdout ----

    def on_lines(self, lines: list[Line]) -> None:
        self._lines.put_nowait(lines)

    @property
    def line_stats(self) -> ReaderStats:
        """What claude's stdout held so far: lines, invalid, truncated, unknown types."""
        return self._reader.stats

    async def _consume(self) -> None:
        while True:
            lines = await self._lines.get()
            if lines is None:
                return
            await self._ingest(lines)

    async def _ingest(self, lines: Sequence[Line]) -> None:
        """Records and translates a batch of stdout lines with as few commits as possible.

        Rows accumulate while nothing can interleave (no await); they are committed before a
        control message is handed to the permission bridge (which persists and emits on its
        own) and whenever the batch reaches its cap, which bounds how long a line waits.
        """
        batch = _LogBatch()
        for line in lines:
            try:
                control = self._ingest_line(batch, line)
            except Exception:
                # One bad line must never stop the session.
                log.exception("session %s: failed to process a line", self.id)
                continue
            if control is not None:
                self._commit(batch)
                batch = _LogBatch()
                await self._react_to_control(control)
            elif len(batch.rows) >= MAX_ROWS_PER_COMMIT:
                self._commit(batch)
                batch = _LogBatch()
        self._commit(batch)

    def _ingest_line(
        self, batch: _LogBatch, line: Line
    ) -> ControlRequest | ControlCancelRequest | None:
        """Records one line (stored raw whatever happens) and its events into `batch`;
        returns it if it is a control message the permission bridge must see."""
        message = self._reader.decode_line(line)
        row = self._message_row("out", line_type(message), line.data)
        events: list[agent_pb2.AgentEvent] = []
        if message is not None:
            try:
                events = self.translator.translate(message)
            except Exception:
                log.exception("session %s: failed to translate line %d", self.id, row.sequence)
        self._record(batch, events, row)
        if isinstance(message, ControlRequest | ControlCancelRequest):
            return message
        if message is not None:
            self._react(message)
        return None

    def _react(self, message: Message) -> None:
        if isinstance(message, SystemInit):
            self._note_claude_session(message.session_id)
        elif isinstance(message, Result):
            self._finish_turn()

    async def _react_to_control(self, message: ControlRequest | ControlCancelRequest) -> None:
        try:
            if isinstance(message, ControlRequest):
                await self._ctx.permissions.on_control_request(self, message)
            else:
                await self._ctx.permissions.on_cancel(self, message.request_id)
        except Exception:
            log.exception("session %s: the permission bridge failed on a control line", self.id)

    def _note_claude_session(self, claude_session_id: str) -> None:
        if claude_session_id and claude_session_id != self.claude_session_id:
            self.claude_session_id = claude_session_id
            self.background_write(
                lambda c: session_rows.set_claude_session_id(
                    c, self.id, claude_session_id, time.time()
                )
            )

    def _finish_turn(self) -> None:
        self.turn_active = False
        usage = self.translator.last_usage
        if usage is not None:
            self.background_write(
                lambda c: session_rows.add_usage(
                    c,
                    self.id,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cost_usd=usage.cost_usd,
                    now=time.time(),
                )
            )
        self._set_status("idle")

    # ---- claude stdin ----

    async def send_user_message(self, client_id: str | None, text: str) -> None:
        if client_id is not None:
            self.lock.check_input(client_id)
        line = stdin.user_message(text, uuid=str(uuid.uuid4()))
        row = self._message_row("in", "user", line.rstrip(b"\n"))
        self.emit(
            [
                translate.user_input_event(text),
                *self.translator.set_status(Status.AGENT_STATUS_THINKING),
            ],
            row,
        )
        self.turn_active = True
        self._set_status("active")
        preview = text.strip().splitlines()[0] if text.strip() else ""
        self.background_write(lambda c: session_rows.set_preview(c, self.id, preview, time.time()))
        await _to_the_end(self._deliver_user_line(line))

    async def _deliver_user_line(self, line: bytes) -> None:
        await self._ctx.permissions.on_session_activity(self)
        await self.supervisor.send(line)

    async def write_control(self, line: bytes, kind: str = "control_response") -> None:
        """Writes a control line (permission answer, interrupt...) and records it."""
        row = self._message_row("in", kind, line.rstrip(b"\n"))
        self.emit([], row)
        await _to_the_end(self.supervisor.send(line))

    async def cancel_turn(self) -> bool:
        if not self.turn_active:
            return False
        self.translator.mark_cancel_requested()
        await self.write_control(stdin.interrupt(), "control_request")
        return True

    # ---- clients ----

    def attach(
        self,
        client_id: str,
        after_seq: int,
        *,
        max_count: int,
        max_bytes: int,
        takes_input: bool = True,
        mark_caught_up: bool = False,
    ) -> AsyncIterator[list[Frame]]:
        """Replay after ``after_seq`` then live. ``takes_input``: the client may hold the lock
        (Converse); observers (ResumeSession) never do."""
        # A from_sequence beyond the log means "only what comes next".
        after_seq = min(after_seq, self._event_seq)
        subscriber = self.hub.subscribe(client_id, self._ctx.settings.client_queue_size)
        if takes_input and self.lock.attach(client_id):
            self._announce_lock()

        async def pending_again(last_seq: int) -> list[Frame]:
            return await self._ctx.permissions.replay_frames(self, last_seq)

        async def read_page(after: int, limit: int) -> list[Frame]:
            return await self._ctx.reader.read_events(self.id, after, limit)

        stream = replay_then_live(
            subscriber,
            read_page,
            after_seq,
            max_count=max_count,
            max_bytes=max_bytes,
            on_caught_up=pending_again,
            mark_caught_up=mark_caught_up,
        )
        return _closing(stream, lambda: self._detach(client_id, subscriber, takes_input))

    def _detach(self, client_id: str, subscriber: Any, takes_input: bool) -> None:
        self.hub.unsubscribe(subscriber)
        if takes_input and self.lock.detach(client_id):
            self._announce_lock()

    async def request_input_lock(self, client_id: str) -> bool:
        """RequestInputLock: the holder has the transfer timeout to answer by sending input."""
        transfer = self.lock.request(client_id)
        if transfer is None:
            self._announce_lock()
            return True
        await asyncio.sleep(max(0.0, transfer.deadline - time.monotonic()))
        granted = self.lock.resolve(transfer)
        if granted:
            self._announce_lock()
        return granted

    def _announce_lock(self) -> None:
        self.emit([translate.input_lock_event(self.lock.holder or "")])

    # ---- supervisor hooks ----

    def on_state(self, state: SupervisorState, detail: str) -> None:
        if state is SupervisorState.RESTARTING:
            # Every restart is news, even right after another one: not deduplicated.
            self.translator.set_status(Status.AGENT_STATUS_RESTARTING, detail)
            self.emit([translate.status_event(Status.AGENT_STATUS_RESTARTING, detail)])
        elif state is SupervisorState.CRASHED:
            self.emit(
                [
                    translate.error_event("SUBPROCESS_CRASHED", detail, is_fatal=False),
                    translate.status_event(Status.AGENT_STATUS_CRASHED, detail),
                ]
            )
            self._set_status("error")
        elif state is SupervisorState.RUNNING:
            self.translator.process_restarted()

    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None:
        if self.turn_active and returncode != 0:
            self.turn_active = False
            message = f"claude exited with code {returncode} during a turn"
            if stderr_tail:
                message += f": {stderr_tail[-1]}"
            self.emit(
                [
                    translate.error_event("SUBPROCESS_CRASHED", message),
                    *self.translator.set_status(Status.AGENT_STATUS_IDLE, message),
                ]
            )
        elif returncode == 0:
            self._set_status("idle")

    def resume_session_id(self) -> str | None:
        return self.claude_session_id

    def turn_in_progress(self) -> bool:
        return self.turn_active

    def permission_pending(self) -> bool:
        return self._ctx.permissions.has_pending(self.id)

    # ---- housekeeping ----

    def background_write(self, fn: Callable[[Any], object]) -> None:
        """A metadata write whose result nobody waits for (it is ordered on the writer)."""
        task = asyncio.ensure_future(self._ctx.writer.call(fn))
        task.add_done_callback(_log_failure)

    def _set_status(self, status: session_rows.SessionStatus) -> None:
        self.background_write(lambda c: session_rows.update_status(c, self.id, status, time.time()))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.supervisor.stop()
        self._lines.put_nowait(None)
        await self._consumer
        self.hub.close_all()


async def _closing(
    stream: AsyncIterator[list[Frame]], on_close: Callable[[], None]
) -> AsyncIterator[list[Frame]]:
    try:
        async for batch in stream:
            yield batch
    finally:
        on_close()


async def _to_the_end(delivery: Coroutine[Any, Any, None]) -> None:
    """Awaits `delivery`, which goes on if the caller is cancelled: its line is already recorded
    and shown to every client, so it must reach claude even when the client that sent it
    disconnects at once (or claude is still starting). A failure nobody awaits is logged."""
    task = asyncio.ensure_future(delivery)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_log_undelivered)
        raise


def _log_undelivered(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a recorded line could not be written to claude: %s", task.exception())


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background store write failed: %s", task.exception())
