"""One BetCode session: the single owner of its sequence numbers.

Every stdout line of its claude process and every stdin line the daemon writes is recorded
(``messages``, line seq), translated into AgentEvents (``events``, event seq), committed by the
store writer, and only then published to the attached clients. Lines are processed strictly in
the order claude wrote them by one consumer task, so a permission request can be persisted
before it is shown without reordering the stream. What the supervisor reports (a process
state, an exit) goes through the same queue (supervisor_reports.py): an exit is judged only
after every line the process printed before it (a `result` already queued ends the turn first).

A turn runs from a recorded user message to its `result`. Whatever else ends it — claude
exiting, the message not reaching claude — ends it visibly (an error, then IDLE), so no client
is left THINKING.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from betcode.claude.command import CommandOptions
from betcode.claude.holder.client import HeldClaude, StdoutMark
from betcode.claude.process import require_workdir
from betcode.claude.supervisor import ClaudeSupervisor, Holding, SupervisorState
from betcode.observability.hooks import TurnReport, observer
from betcode.observability.logs import TRACE, bind_log_fields
from betcode.protocol import writer as stdin
from betcode.protocol.framing import Line
from betcode.protocol.messages import (
    AssistantMessage,
    ControlCancelRequest,
    ControlRequest,
    Message,
    Result,
    SystemInit,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from betcode.protocol.reader import ProtocolReader, ReaderStats
from betcode.sessions import translate
from betcode.sessions.attach import replay_then_live
from betcode.sessions.event_log import EventLog, LogBatch
from betcode.sessions.fanout import FanoutHub, Frame
from betcode.sessions.input_lock import InputLock
from betcode.sessions.line_types import line_type
from betcode.sessions.lock_transfers import LockTransfers
from betcode.sessions.supervisor_reports import SupervisorReports
from betcode.sessions.turn_usage import TurnUsage
from betcode.sessions.turns import TurnEnd, Turns
from betcode.storage import sessions as session_rows
from betcode.storage import spend as spend_rows
from betcode.storage.errors import StoreClosed
from betcode.storage.holders import HolderStdinJournal
from betcode.storage.rows import (
    Direction,
    HolderPositionRow,
    IdempotencyKeyRow,
    MessageRow,
    QueuedMessageTakenRow,
)
from betcode.v1 import agent_pb2, common_pb2

if TYPE_CHECKING:
    from betcode.sessions.context import SessionContext

# A line of an adopted conversation: its direction, type, bytes, and the events it reads as.
HistoryLine = tuple[Direction, str, bytes, list[agent_pb2.AgentEvent]]
log = logging.getLogger(__name__)

T = TypeVar("T")

Status = common_pb2.AgentStatus

# Rows of one writer append while ingesting: a line waits at most this many rows' work before
# its commit starts, and a subscriber is offered at most about this many frames at once.
MAX_ROWS_PER_COMMIT = 256

# What the consumer task takes in order: a batch of stdout lines (with where they end in a
# holder's output), a supervisor report, or None (the session is closing).
_Item = tuple[Sequence[Line], StdoutMark | None] | Callable[[], None] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Recalled:
    """What a re-attached session's translator is told again (`Translator.recall`): the
    stored lines of its claude's current turn, and the last status the translator set (a
    serialized StatusChange event; None if none)."""

    lines: Sequence[MessageRow]
    status: bytes | None


STREAMS_ENDED = "the daemon is stopping; reconnect to the next one"


class StreamsEnded(Exception):
    """A client's attachment ended because the daemon is stopping (Session.end_streams)."""


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
        self.hub = FanoutHub()
        self._log = EventLog(
            record.id, context.writer, self.hub, line_seq=line_seq, event_seq=event_seq
        )
        self.lock = InputLock(
            context.settings.lock_transfer_seconds, context.settings.lock_idle_seconds
        )
        self._lock_transfers = LockTransfers(
            record.id, lock=self.lock, emit=self.emit, background_write=self.background_write
        )
        self._reader = ProtocolReader()
        self.translator = translate.Translator(
            session_id=record.id,
            worktree_id=record.worktree_id or "",
            is_resumed=record.claude_session_id is not None,
        )
        self.claude_session_id = record.claude_session_id
        self._turns = Turns()
        self._turn_started_at = time.monotonic()
        self.closed = False
        self.streams_ended = False  # end_streams: the daemon is stopping
        self._lines: asyncio.Queue[_Item] = asyncio.Queue()
        # Called at the end of every turn, in order (subagents wait on their session this way).
        self.turn_listeners: list[Callable[[TurnEnd], None]] = []
        self._reports = SupervisorReports(
            turns=self._turns,
            translator=self.translator,
            emit=self.emit,
            set_status=self._set_status,
            enqueue=self._lines.put_nowait,
            turn_cut=lambda message, code: self._turn_ended(TurnEnd(False, message, code)),
        )
        self._consumer = asyncio.create_task(self._consume(), name=f"session-{self.id}")
        self.supervisor = ClaudeSupervisor(
            context.claude_binary,
            Path(record.working_directory),
            context.child_env,
            context.process_policy,
            self,
            options=CommandOptions(model=record.model or None, allowed_tools=tuple(allowed_tools)),
            worktree=record.worktree_id is not None,
            holding=None
            if context.holders is None
            else Holding(context.holders, record.id, HolderStdinJournal(context.writer, record.id)),
        )

    def emit(
        self,
        events: Sequence[agent_pb2.AgentEvent],
        message: MessageRow | None = None,
        on_published: Callable[[], None] | None = None,
    ) -> list[Frame]:
        """Stamps, serializes and stores events (+ their source line), publishing after commit."""
        return self._log.emit(events, message, on_published)

    def import_history(self, lines: Sequence[HistoryLine]) -> None:
        """Stores a conversation's earlier lines (each with its direction, type and the events
        it reads as) as if they had passed through this session: an adopted conversation."""
        for direction, kind, payload, events in lines:
            self.emit(events, self._log.message_row(direction, kind, payload))

    # ---- claude stdout ----

    def on_lines(self, lines: list[Line], mark: StdoutMark | None = None) -> None:
        self._lines.put_nowait((lines, mark))

    @property
    def line_stats(self) -> ReaderStats:
        """What claude's stdout held so far: lines, invalid, truncated, unknown types."""
        return self._reader.stats

    async def _consume(self) -> None:
        bind_log_fields(session_id=self.id)
        while True:
            item = await self._lines.get()
            if item is None:
                return
            if callable(item):
                try:
                    item()
                except Exception:
                    log.exception("session %s: failed to handle a supervisor report", self.id)
            else:
                await self._ingest(*item)

    async def _ingest(self, lines: Sequence[Line], mark: StdoutMark | None) -> None:
        """Records and translates a batch of stdout lines with as few commits as possible.

        Rows accumulate while nothing can interleave (no await); they are committed before a
        control message is handed to the permission bridge (which persists and emits on its
        own) and whenever the batch reaches its cap, which bounds how long a line waits.
        """
        observer().lines_processed(len(lines))
        batch = LogBatch()
        for index, line in enumerate(lines):
            if log.isEnabledFor(TRACE):
                log.log(TRACE, "claude stdout: %s", line.data.decode("utf-8", "replace"))
            try:
                control = self._ingest_line(batch, line)
            except Exception:
                # One bad line must never stop the session.
                log.exception("session %s: failed to process a line", self.id)
                control = None
            if control is not None:
                self._commit_lines(batch, mark, index)
                batch = LogBatch()
                await self._react_to_control(control)
            elif len(batch.rows) >= MAX_ROWS_PER_COMMIT:
                self._commit_lines(batch, mark, index)
                batch = LogBatch()
        if batch.rows:
            self._commit_lines(batch, mark, len(lines) - 1)

    def _commit_lines(self, batch: LogBatch, mark: StdoutMark | None, last: int) -> None:
        """Commits `batch`, whose last line is `lines[last]`; under a holder, with where that
        line ends in claude's output, which the holder may forget once committed."""
        if mark is None:
            self._log.commit(batch)
            return
        end = mark.ends[last]
        batch.rows.append(HolderPositionRow(self.id, mark.holder_id, end, batch.now))
        self._log.commit(batch, lambda: mark.acknowledge(end))

    def _ingest_line(
        self, batch: LogBatch, line: Line
    ) -> ControlRequest | ControlCancelRequest | None:
        """Records one line (stored raw whatever happens) and its events into `batch`;
        returns it if it is a control message the permission bridge must see."""
        message = self._reader.decode_line(line)
        row = self._log.message_row("out", line_type(message), line.data)
        events: list[agent_pb2.AgentEvent] = []
        if message is not None:
            try:
                events = self.translator.translate(message)
            except Exception:
                log.exception("session %s: failed to translate line %d", self.id, row.sequence)
        self._log.record(batch, events, row)
        if isinstance(message, ControlRequest | ControlCancelRequest):
            return message
        if message is not None:
            self._react(message)
        return None

    def _react(self, message: Message) -> None:
        if isinstance(message, SystemInit):
            self._note_claude_session(message.session_id)
            self._keep_model(message.model)
        elif isinstance(message, Result):
            self._finish_turn()
            self._turn_ended(TurnEnd.of_result(message))
        elif isinstance(message, AssistantMessage | UserMessage):
            self._observe_tool_calls(message)

    def _observe_tool_calls(self, message: AssistantMessage | UserMessage) -> None:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                observer().tool_call_started(self.id, block.id, block.name)
            elif isinstance(block, ToolResultBlock):
                observer().tool_call_finished(self.id, block.tool_use_id, block.is_error)

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

    def _keep_model(self, model: str) -> None:
        """A restarted claude (also after a daemon restart) runs the model this one runs, a
        `/model` switch included: claude applies that to its own process only."""
        options = self.supervisor.command_options
        if model and model != options.model:
            self.supervisor.command_options = dataclasses.replace(options, model=model)
            self.background_write(lambda c: session_rows.set_model(c, self.id, model, time.time()))

    @property
    def turn_active(self) -> bool:
        return self._turns.active

    def _finish_turn(self) -> None:
        self._turns.finish()
        usage = self.translator.last_usage
        if usage is not None:
            observer().turn_finished(
                TurnReport(
                    session_id=self.id,
                    duration_s=time.monotonic() - self._turn_started_at,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cost_usd=usage.cost_usd,
                    is_error=usage.is_error,
                )
            )
            self.background_write(lambda c: self._add_usage(c, usage, time.time()))
        self._set_status("idle")

    def _add_usage(self, conn: sqlite3.Connection, usage: TurnUsage, now: float) -> None:
        """The turn's usage, into the session's totals and its spend of the day (cost caps)."""
        session_rows.add_usage(
            conn,
            self.id,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
            now=now,
        )
        spend_rows.add_turn_cost(conn, self.id, usage.cost_usd, now)

    def _turn_ended(self, end: TurnEnd) -> None:
        for listener in list(self.turn_listeners):
            try:
                listener(end)
            except Exception:
                log.exception("session %s: a turn listener failed", self.id)

    # ---- claude stdin ----

    async def send_user_message(
        self,
        client_id: str | None,
        text: str,
        *,
        queued_id: int | None = None,
        idempotency_key: str = "",
    ) -> None:
        """Records the message, shows it, and writes it to claude (started if needed). A
        session whose claude CRASHED starts over: the message is the manual action that resets
        the crash budget (claude resumes the conversation with --resume). A message that waited
        in the turn queue (`queued_id`, its stored row) leaves the queue in the transaction
        that records its line: a daemon killed meanwhile has either still queued it or
        recorded it. So is the client's `idempotency_key` recorded with the line."""
        if client_id is not None:
            self.lock.check_input(client_id)
        # Refused before it is recorded: a message that can never reach claude starts no turn
        # (the spawn itself checks again).
        await require_workdir(
            Path(self.record.working_directory), worktree=self.record.worktree_id is not None
        )
        if self.supervisor.state is SupervisorState.CRASHED:
            log.info("session %s: a new message restarts claude after the crashes", self.id)
            self.supervisor.reset()
        line = stdin.user_message(text, uuid=str(uuid.uuid4()))
        batch = LogBatch()
        self._log.record(
            batch,
            [
                translate.user_input_event(text),
                *self.translator.set_status(Status.AGENT_STATUS_THINKING),
            ],
            self._log.message_row("in", "user", line.rstrip(b"\n")),
        )
        if queued_id is not None:
            batch.rows.append(QueuedMessageTakenRow(self.id, queued_id, batch.now))
        if idempotency_key:
            batch.rows.append(IdempotencyKeyRow(self.id, idempotency_key, batch.now))
        self._log.commit(batch)
        turn = self._turns.start()
        self._turn_started_at = time.monotonic()
        observer().turn_started(self.id)
        self._set_status("active")
        preview = text.strip().splitlines()[0] if text.strip() else ""
        self.background_write(lambda c: session_rows.set_preview(c, self.id, preview, time.time()))
        await _to_the_end(self._deliver_user_line(line, turn))

    async def _deliver_user_line(self, line: bytes, turn: int) -> None:
        self._turns.delivering += 1
        try:
            await self._ctx.permissions.on_session_activity(self)
            await self.supervisor.send(line)
        except Exception as error:
            self._undelivered(turn, error)
            raise
        finally:
            self._turns.delivering -= 1

    def _undelivered(self, turn: int, error: Exception) -> None:
        """The message of `turn` never reached claude: its turn ends here. When claude
        CRASHED, that announcement (queued by the supervisor) is the last status."""
        if not self._turns.undelivered(turn):
            return  # a later message took over the session's turn
        self._set_status("idle")
        message = f"the message did not reach claude: {error}"
        self._turn_ended(TurnEnd(False, message, -1))
        if self.supervisor.state is SupervisorState.CRASHED:
            return
        self.emit(
            [
                translate.error_event("SUBPROCESS_CRASHED", message),
                *self.translator.set_status(Status.AGENT_STATUS_IDLE, message),
            ]
        )

    async def write_control(
        self, line: bytes, to_pid: int | None, kind: str = "control_response"
    ) -> bool:
        """Records and writes a control line (a permission answer, an interrupt) for claude
        process `to_pid`, only while that process runs: False, and nothing recorded or written,
        once it stopped, exited or was replaced (the line means nothing to any other claude,
        and writing it would start a stopped one: `ClaudeSupervisor.write_to`)."""
        return await _to_the_end(self._write_control(line, to_pid, kind))

    async def _write_control(self, line: bytes, to_pid: int | None, kind: str) -> bool:
        # Checked, recorded and handed to the supervisor in one step of the loop: a line is
        # recorded only for the process it is written to.
        if not self.supervisor.runs(to_pid):
            log.info(
                "session %s: claude pid %s no longer runs; %s not written: %s",
                self.id,
                to_pid,
                kind,
                line[:200].decode("utf-8", "replace").rstrip(),
            )
            return False
        self.emit([], self._log.message_row("in", kind, line.rstrip(b"\n")))
        return await self.supervisor.write_to(to_pid, line)

    async def cancel_turn(self) -> bool:
        if not self.turn_active:
            return False
        self.translator.mark_cancel_requested()
        await self.write_control(stdin.interrupt(), self.supervisor.pid, "control_request")
        return True

    # ---- clients ----

    async def attach(
        self,
        client_id: str,
        after_seq: int | None,
        *,
        max_count: int,
        max_bytes: int,
        takes_input: bool = True,
        viewer: bool = False,
        mark_caught_up: bool = False,
        follow: bool = True,
    ) -> AsyncGenerator[list[Frame], None]:
        """Replay after ``after_seq`` (None: only events not yet delivered to anyone), then,
        if ``follow``, live. ``takes_input``: the client may hold the lock (Converse);
        observers (ResumeSession) never do. A ``viewer`` (a web page) may, but only once it
        sends input or asks for it (input_lock).

        The client is subscribed (and may take the lock) only once the stream is first
        iterated, inside the stream's own try/finally: a stream dropped before it started
        holds nothing, one closed or cancelled later lets go of everything."""

        async def pending_again(last_seq: int) -> list[Frame]:
            return await self._ctx.permissions.replay_frames(self, last_seq)

        async def read_page(after: int, limit: int) -> list[Frame]:
            return await self._ctx.reader.read_events(self.id, after, limit)

        subscriber = self.hub.subscribe(client_id, self._ctx.settings.client_queue_size)
        try:
            if takes_input:
                self.lock.attach(client_id, viewer=viewer)
            # Read after subscribing: what was published before is not sent, what comes
            # after is queued. A from_sequence beyond the log means "only what comes next".
            live_edge = self._log.published_seq
            stream = replay_then_live(
                subscriber,
                read_page,
                live_edge if after_seq is None else min(after_seq, self._log.event_seq),
                max_count=max_count,
                max_bytes=max_bytes,
                on_caught_up=pending_again,
                mark_caught_up=mark_caught_up,
                follow=follow,
            )
            async for batch in stream:
                yield batch
            if self.streams_ended:
                raise StreamsEnded(STREAMS_ENDED)
        finally:
            self.hub.unsubscribe(subscriber)
            if takes_input:
                self.lock.detach(client_id)

    async def request_input_lock(self, client_id: str) -> bool:
        """RequestInputLock: the holder has the transfer timeout to answer by sending input."""
        return await self._lock_transfers.request(client_id)

    # ---- what the supervisor asks and reports (reports: supervisor_reports.py) ----

    def on_state(self, state: SupervisorState, detail: str) -> None:
        self._reports.on_state(state, detail)

    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None:
        self._reports.on_exit(returncode, stderr_tail)

    def on_conversation_lost(self, claude_session_id: str) -> None:
        self._reports.on_conversation_lost(claude_session_id)

    def resume_session_id(self) -> str | None:
        return self.claude_session_id

    def turn_in_progress(self) -> bool:
        return self.turn_active

    def permission_pending(self) -> bool:
        return self._ctx.permissions.has_pending(self.id)

    # ---- housekeeping ----

    def background_write(self, fn: Callable[[Any], object]) -> None:
        """A metadata write whose result nobody waits for (it is ordered on the writer)."""
        try:
            self._ctx.writer.submit(fn).add_done_callback(_log_failure)
        except StoreClosed:
            log.warning("session %s: a metadata write came after the store closed", self.id)

    def _set_status(self, status: session_rows.SessionStatus) -> None:
        self.background_write(lambda c: session_rows.update_status(c, self.id, status, time.time()))

    def adopt(self, process: HeldClaude, recalled: Recalled) -> None:
        """After a daemon restart: claude still runs under its holder. A turn that was running
        when the daemon went away goes on; its lines come first (the holder spooled them)."""
        if self.record.status == "active":
            self._turns.start()
        self.supervisor.adopt(process)
        # Queued after the RUNNING report of the adoption (which forgets per-process stream
        # state) and before any line the holder sends.
        self._lines.put_nowait(functools.partial(self._recall, recalled))

    def _recall(self, recalled: Recalled) -> None:
        reader = ProtocolReader()
        messages = [
            message
            for row in recalled.lines
            if row.direction == "out" or row.message_type == "control_request"
            if (message := reader.decode(row.payload)) is not None
        ]
        status = None
        if recalled.status is not None:
            change = agent_pb2.AgentEvent.FromString(recalled.status).status_change
            status = (change.status, change.message)
        self.translator.recall(messages, status)

    def end_streams(self) -> None:
        """The daemon is stopping: every client's attachment ends now, raising StreamsEnded
        (its client reconnects to the next daemon), not when the client lets go."""
        self.streams_ended = True
        self.hub.close_all()

    async def close(self, *, keep_claude: bool = False, daemon_stops: bool = False) -> None:
        """Stop claude and the session; `keep_claude`: leave claude running under its holder
        (whatever is not committed yet, the next daemon gets again from the holder);
        `daemon_stops`: claude is stopped because the daemon stops, which is no crash."""
        if self.closed:
            return
        if daemon_stops:
            self._reports.daemon_stops(request_open=self.permission_pending())
        self.closed = True
        if keep_claude:
            self.supervisor.detach()
        else:
            await self.supervisor.stop()
        self._lines.put_nowait(None)
        await self._consumer
        self.hub.close_all()


async def _to_the_end(delivery: Coroutine[Any, Any, T]) -> T:
    """Awaits `delivery`, which goes on if the caller is cancelled: its line is already recorded
    and shown to every client, so it must reach claude even when the client that sent it
    disconnects at once (or claude is still starting). A failure nobody awaits is logged."""
    task = asyncio.ensure_future(delivery)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_log_undelivered)
        raise


def _log_undelivered(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a recorded line could not be written to claude: %s", task.exception())


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background store write failed: %s", task.exception())
