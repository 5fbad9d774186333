"""Whether a client's message starts a turn now, waits, or asks first (docs/LIMITS.md).

A message within every cap goes to the turn queue (`turn_queue`): it starts at once unless
`daemon.limits.max_running_turns` turns already run.

Every user message from a client (gRPC Converse, the web client) comes here before it reaches
its session. A session that has reached a cost cap (its own, `daemon.limits.session_cost_usd`,
or the daemon's `daemon.limits.daily_cost_usd` for the local day) does not start the turn: the
message waits as a cost request in the permission bridge, and is sent once that is allowed.
The check reads the spend through the store writer, so it sees every turn already ended
(their usage is written before their `result` is shown). A turn in progress is never cut: only
the start of the next one is checked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from betcode.config.settings import LimitSettings
from betcode.limits.memory import MemoryWatch
from betcode.limits.turn_queue import TurnQueue
from betcode.observability.live_state import LimitsReading
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.cost_requests import CapReached, is_cost_request
from betcode.sessions.session import Session
from betcode.storage import idempotency
from betcode.storage import queued as queued_rows
from betcode.storage import spend as spend_rows
from betcode.storage.errors import StoreClosed
from betcode.storage.spend import SessionSpend
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)

READING_INTERVAL_SECONDS = 10.0


class BadLimit(ValueError):
    """A cap that cannot be set (negative, zero, not a finite number)."""


@dataclass(frozen=True, slots=True)
class CostLimits:
    """Every session's cost cap: its own, else the setting (`default`, None: no cap)."""

    own: dict[str, float]
    default: float | None

    def of(self, session_id: str) -> float | None:
        return self.own.get(session_id, self.default)


class StoredQueue:
    """The turn queue's messages in SQLite (storage/queued.py)."""

    def __init__(self, writer: StoreWriter) -> None:
        self._writer = writer

    async def add(self, session_id: str, text: str, idempotency_key: str) -> int:
        now = time.time()

        def add(conn: sqlite3.Connection) -> int:
            if idempotency_key:
                idempotency.remember_key(conn, idempotency_key, session_id, now)
            return queued_rows.add(conn, session_id, text, now)

        return await self._writer.call(add)

    def remove(self, row_ids: list[int]) -> None:
        try:
            self._writer.submit(lambda c: queued_rows.remove(c, row_ids))
        except StoreClosed:
            log.warning("queued messages %s: not forgotten, the store is closed", row_ids)


class TurnAdmission:
    def __init__(
        self,
        writer: StoreWriter,
        bridge: PermissionBridge,
        settings: LimitSettings,
        memory: MemoryWatch,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._writer = writer
        self._bridge = bridge
        self._clock = clock
        self.settings = settings
        self.memory = memory
        self._stored_queue = StoredQueue(writer)
        self.queue = TurnQueue(settings.max_running_turns, self._start, self._stored_queue)
        self._spend_reading = LimitsReading()  # refreshed by `run_readings`
        bridge.costs.send_held = self._send_allowed

    def apply_settings(self, settings: LimitSettings) -> None:
        """A reload: caps apply to messages from now on."""
        self.settings = settings
        self.queue.apply(settings.max_running_turns)
        self.memory.apply_settings(settings)

    async def send(
        self, session: Session, client_id: str | None, text: str, idempotency_key: str = ""
    ) -> None:
        """The client's message: sent, or held as a cost request when a cap is reached; its
        idempotency key is recorded in the same transaction as it."""
        if client_id is not None:
            session.lock.check_input(client_id)  # refused before anything is asked or queued
        await self.queue.submit(session, client_id, text, idempotency_key)

    async def _send_allowed(self, session: Session, text: str) -> None:
        await self.queue.submit(session, None, text)

    async def _start(
        self,
        session: Session,
        client_id: str | None,
        text: str,
        queued_id: int | None,
        idempotency_key: str,
    ) -> bool:
        """The turn starts unless the session has reached a cost cap: checked when it would
        start, after the turns queued before it, not when it was queued. A queued message
        leaves the queue in the transaction that stores its line or its cost request."""
        reached = await self.cap_reached(session.id)
        if reached is not None:
            await self._bridge.ask_about_cost(
                session, text, reached, queued_id, idempotency_key=idempotency_key
            )
            return False
        await session.send_user_message(
            client_id, text, queued_id=queued_id, idempotency_key=idempotency_key
        )
        return True

    async def restore_queue(self, session: Callable[[str], Awaitable[Session]]) -> None:
        """Startup, before serving: the messages a restarted daemon had queued wait again."""
        stored = await self._writer.call(queued_rows.in_order)
        queued: list[tuple[int, Session, str]] = []
        for row_id, session_id, text in stored:
            try:
                queued.append((row_id, await session(session_id), text))
            except Exception:
                log.exception("session %s: a queued message cannot wait again", session_id)
                self._stored_queue.remove([row_id])
        self.queue.restore(queued)

    def cancel(self, session: Session) -> int:
        """A cancel: the session's messages waiting for a turn slot are not sent; how many."""
        return self.queue.cancel(session)

    async def spend(self, session_id: str) -> SessionSpend:
        now = self._clock()
        return await self._writer.call(lambda c: spend_rows.session_spend(c, session_id, now))

    async def cap_reached(self, session_id: str) -> CapReached | None:
        """The cap the session has reached, if any: its own (or the setting) first, then the
        daily one (raised for it by the daily requests it was allowed)."""
        spend = await self.spend(session_id)
        limit = self.session_limit(spend)
        if limit is not None and spend.total_usd >= limit:
            return CapReached("session", spend.total_usd, limit, limit, spend.day)
        daily = self.settings.daily_cost_usd
        if daily > 0 and spend.day_total_usd >= daily + spend.day_allowance_usd:
            limit = daily + spend.day_allowance_usd
            return CapReached("day", spend.day_total_usd, limit, daily, spend.day)
        return None

    def session_limit(self, spend: SessionSpend) -> float | None:
        """The session's cap: its own, else the setting; None when it has none."""
        if spend.own_limit_usd is not None:
            return spend.own_limit_usd
        return self.settings.session_cost_usd or None

    def reading(self) -> LimitsReading:
        """For the metrics, at scrape time (from the endpoint's thread: reads and copies)."""
        measured = list(self.memory.measured.values())
        return dataclasses.replace(
            self._spend_reading,
            turns_running=self.queue.running,
            turns_queued=self.queue.waiting,
            claude_rss_bytes=tuple(m.rss_bytes for m in measured),
            sessions_over_rss_limit=sum(m.over_limit for m in measured),
            claude_stopped_for_memory=self.memory.stopped,
        )

    async def run_readings(self, interval: float = READING_INTERVAL_SECONDS) -> None:
        """Read the spend for the metrics every `interval` seconds, until cancelled."""
        while True:
            try:
                await self.refresh_reading()
            except StoreClosed:
                return
            except Exception:
                log.exception("reading the spend for the metrics failed")
            await asyncio.sleep(interval)

    async def refresh_reading(self) -> None:
        now = self._clock()
        day = spend_rows.local_day(now)

        def read(
            conn: sqlite3.Connection,
        ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
            return (
                spend_rows.session_totals(conn),
                spend_rows.own_limits(conn),
                spend_rows.day_spend(conn, day),
            )

        totals, own, today = await self._writer.call(read)
        limits = CostLimits(own, self.settings.session_cost_usd or None)
        at_limit = 0
        for session_id, total in totals.items():
            limit = limits.of(session_id)
            at_limit += limit is not None and total >= limit
        self._spend_reading = LimitsReading(
            spend_today_usd=sum(today.values()),
            daily_cost_limit_usd=self.settings.daily_cost_usd,
            session_spend_usd=tuple(totals.values()),
            sessions_at_cost_limit=at_limit,
        )

    async def session_limits(self) -> CostLimits:
        own = await self._writer.call(spend_rows.own_limits)
        return CostLimits(own, self.settings.session_cost_usd or None)

    async def describe(self, summaries: Iterable[agent_pb2.SessionSummary]) -> None:
        """Each summary's cost cap, its claude's memory, and whether a message of it waits
        (for a turn slot, or on a cost request), as known now."""
        limits = await self.session_limits()
        places = self.queue.places()
        at_cost_limit = {
            row.session_id for row in await self._bridge.list_pending(None) if is_cost_request(row)
        }
        for summary in summaries:
            summary.cost_limit_usd = limits.of(summary.id) or 0.0
            summary.queue_position, summary.queue_length = places.get(summary.id, (0, 0))
            summary.waiting_cost_limit = summary.id in at_cost_limit
            measured = self.memory.of(summary.id)
            if measured is not None:
                summary.claude_rss_bytes = measured.rss_bytes
                summary.over_rss_limit = measured.over_limit

    async def set_session_limit(self, session_id: str, cost_usd: float | None) -> SessionSpend:
        """`sessions limit ID --cost-usd X` (None: back to the setting); BadLimit for a value
        that is not a positive finite number."""
        if cost_usd is not None and (not math.isfinite(cost_usd) or cost_usd <= 0):
            raise BadLimit(f"a cost limit must be a positive number of USD, not {cost_usd:g}")
        await self._writer.call(lambda c: spend_rows.set_own_limit(c, session_id, cost_usd))
        log.info("session %s: its cost limit is now %s", session_id, cost_usd)
        return await self.spend(session_id)
