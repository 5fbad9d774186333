"""One subagent's life: wait for a place in the pool, run its session's turn, record the end.

A subagent is a session (sessions.manager) whose claude gets the subagent's flags and env; its
runner sends the prompt as an ordinary user message and waits for the turn to end (the
session's turn listeners): a `result` that is not an error → completed with that text as the
result summary; an error result, claude exiting mid-turn, or the wall-clock timeout → failed;
CancelSubagent → cancelled. Its claude is then stopped; nothing restarts it (SAG-20): from the
moment the run starts ending (`ending`), its questions in the parent's inbox take no answer, and
once claude has stopped the ones nobody answered are withdrawn (`RunQuestions`). The final
status is stored before `finished` resolves, so whoever waits on it reads a settled row.

Resumed after a daemon restart, the stored session decides: a `result` after the prompt is the
outcome; a claude that outlived the daemon under its holder and is still in the turn is only
waited for; otherwise claude is asked to continue (or, if the prompt never reached it, given it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from betcode.sessions.session import Session
from betcode.sessions.turns import TurnEnd
from betcode.storage import subagents as rows
from betcode.storage.writer import StoreWriter
from betcode.subagents.delegation import Delegation
from betcode.subagents.pool import SubagentPool

log = logging.getLogger(__name__)

T = TypeVar("T")

CONTINUE_PROMPT = (
    "The BetCode daemon restarted while you were working on this task. Continue it where you "
    "stopped and finish with your result."
)


@dataclass(frozen=True, slots=True)
class Outcome:
    status: rows.SubagentStatus  # completed | failed | cancelled
    summary: str = ""
    exit_code: int = 0
    ended_by: str | None = None  # the client that cancelled it; None: the daemon ended it

    @property
    def error(self) -> str:
        return "" if self.status == "completed" else self.summary


def why_ended(status: rows.SubagentStatus, error: str | None) -> str:
    """What a subagent's withdrawn questions say: "subagent cancelled: <reason>"."""
    # A cancel without a reason records its status as its error.
    return f"subagent {status}: {error}" if error and error != status else f"subagent {status}"


class RunQuestions(Protocol):
    """The run's questions in its parent's inbox, which end with it (inbox.ParentInbox)."""

    async def close(self, run: SubagentRun) -> None:
        """No answer is applied from now on (`run.ending` is set): returns once those
        already being applied are done, while its claude still runs."""

    async def withdraw(self, run: SubagentRun, outcome: Outcome) -> int:
        """Its claude has stopped: the questions nobody answered are withdrawn; how many."""


class SubagentRun:
    """The live part of a subagent (its row holds the rest)."""

    def __init__(
        self,
        row: rows.SubagentRow,
        session: Session,
        writer: StoreWriter,
        pool: SubagentPool,
        delegation: Delegation,
        questions: RunQuestions,
        *,
        timeout_seconds: float,
        resume: bool = False,
        gate: Callable[[], Awaitable[None]] | None = None,
        on_finished: Callable[[SubagentRun], None] = lambda run: None,
    ) -> None:
        self.row = row
        self.session = session
        self.delegation = delegation
        self._writer = writer
        self._pool = pool
        self._questions = questions
        self._timeout = timeout_seconds
        self._resume = resume
        self._gate = gate  # waited for before a pool place: the worktree lock it asked to wait for
        self._on_finished = on_finished
        self._outstanding = 0  # user messages whose turn has not ended
        self._turn_over: asyncio.Future[TurnEnd] | None = None
        self._ended_unawaited = False  # a turn ended while nothing waited for one
        self._cancel_reason: str | None = None
        self._cancelled_by: str | None = None
        self._abandoned = False  # the daemon stops: the row stays unfinished, to be resumed
        self._held_back: set[asyncio.Task[Any]] = set()  # calls queued for the rate limit
        self.status: rows.SubagentStatus = "pending"
        self.ending: Outcome | None = None  # set once it ends: its questions take no answer
        self.questions_withdrawn = 0
        self.finished: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        session.turn_listeners.append(self._on_turn_end)
        self._task = asyncio.create_task(self._run(), name=f"subagent-{row.id}")

    @property
    def id(self) -> str:
        return self.row.id

    async def _run(self) -> None:
        outcome = Outcome("failed", "the subagent did not run", -1)
        try:
            if self._gate is not None:
                await self._gate()
            await self._pool.acquire()
            try:
                outcome = await self._run_in_pool()
            finally:
                self._pool.release()
        except asyncio.CancelledError:
            if self._abandoned:
                raise
            reason = self._cancel_reason or "cancelled"
            outcome = Outcome("cancelled", reason, -1, ended_by=self._cancelled_by)
        except Exception as error:
            log.exception("subagent %s failed to run", self.id)
            outcome = Outcome("failed", f"the subagent could not run: {error}", -1)
        finally:
            self.session.turn_listeners.remove(self._on_turn_end)
            self.delegation.close()
            for call in self._held_back:
                call.cancel()
        await self._stop(outcome)
        await self._record(outcome)

    async def _run_in_pool(self) -> Outcome:
        self.status = "running"
        await self._writer.call(
            lambda c: rows.set_subagent_status(c, self.id, "running", time.time())
        )
        prompt: str | None = self.row.prompt
        if self._resume:
            finished = await self._stored_result()
            if finished is not None:  # the turn ended while the daemon was down
                return _outcome_of(finished)
            prompt = self._resume_prompt()
        limit = self._timeout
        why = f"timed out after {limit / 60:g} minutes (SIGTERM)"
        box = self.delegation.time_box_left()
        if box is not None and box < limit:  # auto-approve's time box ends it first (SAG-13)
            limit = box
            seconds = self.delegation.limits.max_duration_seconds
            why = f"the auto-approve time box of {seconds} s is over (SIGTERM)"
        try:
            async with asyncio.timeout(limit):
                end = await self._send_and_wait(prompt)
        except TimeoutError:
            return Outcome("failed", why, -1)
        return Outcome("completed", end.text, 0) if end.ok else Outcome("failed", end.text, 1)

    async def _stored_result(self) -> dict[str, object] | None:
        """claude's `result` after the last prompt, as stored. Read again when a turn ended
        during the read (a re-attached claude's spool being ingested): its line was queued on
        the writer behind the read, so only the second look sees it."""
        while True:
            self._ended_unawaited = False
            result = await self._writer.call(lambda c: rows.last_turn_result(c, self.session.id))
            if result is not None or not self._ended_unawaited:
                return result

    def _resume_prompt(self) -> str | None:
        """What a resumed subagent's session needs: nothing when its claude outlived the
        daemon under its holder and is still in the turn (its end is awaited, not interrupted
        by a second message); "continue" when the prompt reached claude; else the prompt."""
        if self.session.supervisor.reattached and self.session.turn_active:
            return None
        return CONTINUE_PROMPT if self.session.claude_session_id is not None else self.row.prompt

    async def _send_and_wait(self, prompt: str | None) -> TurnEnd:
        """Sends `prompt` (None: only waits for the running turn) and waits for its end."""
        self._turn_over = asyncio.get_running_loop().create_future()
        if prompt is not None:
            await self.send(prompt)
        return await self._turn_over

    async def send(self, text: str) -> None:
        """A user message to the subagent's claude (its prompt, or SendToSubagent)."""
        self._outstanding += 1
        try:
            await self.session.send_user_message(None, text)
        except BaseException:
            self._outstanding -= 1
            raise

    def _on_turn_end(self, end: TurnEnd) -> None:
        self._outstanding = max(0, self._outstanding - 1)
        waiting = self._turn_over
        if waiting is None:
            self._ended_unawaited = True
            return
        if waiting.done():
            return
        if not end.ok or self._outstanding == 0:
            waiting.set_result(end)

    async def cancel(self, reason: str, by: str | None = None) -> None:
        """CancelSubagent (by client `by`): stop claude (SIGTERM, grace, SIGKILL) and record
        `cancelled`. A run already ending is left to end as it does."""
        if self.ending is None:
            self._cancel_reason = reason or "cancelled"
            self._cancelled_by = by
            self._task.cancel()
        await asyncio.wait({self._task})

    async def abandon(self) -> None:
        """The daemon stops: nothing is recorded; an orchestration resumes this run later."""
        self._abandoned = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.finished.cancel()

    def hold_back(self, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Runs a call its rate limit queues until the limit lets it through; cancelled when
        the run ends (claude is stopped then: nothing is to answer the call)."""
        task = asyncio.create_task(call, name=f"subagent-{self.id}-queued-call")
        self._held_back.add(task)
        task.add_done_callback(self._held_back.discard)
        return task

    def terminate(self, reason: str) -> None:
        """Ends the subagent as failed (a revoke with terminate_if_pending, a time box)."""
        waiting = self._turn_over
        if waiting is not None and not waiting.done():
            waiting.set_result(TurnEnd(False, reason, -1))

    async def _stop(self, outcome: Outcome) -> None:
        """Its questions closed to answers, then its claude stopped, then those nobody
        answered withdrawn (in this order: an answer never reaches a stopped claude, which it
        would start again). A failure is logged; the run ends all the same."""
        self.ending = outcome
        try:
            await self._questions.close(self)
        except Exception:
            log.exception("subagent %s: closing its questions failed", self.id)
        await self._stop_claude()
        try:
            self.questions_withdrawn = await self._questions.withdraw(self, outcome)
        except Exception:
            log.exception("subagent %s: withdrawing its questions failed", self.id)

    async def _stop_claude(self) -> None:
        try:
            await self.session.supervisor.stop()
        except Exception:
            log.exception("subagent %s: stopping its claude failed", self.id)

    async def _record(self, outcome: Outcome) -> None:
        self.status = outcome.status
        summary = outcome.summary if outcome.status == "completed" else None
        try:
            await self._writer.call(
                lambda c: rows.set_subagent_status(
                    c,
                    self.id,
                    outcome.status,
                    time.time(),
                    result_summary=summary,
                    exit_code=outcome.exit_code,
                    error_message=outcome.error or None,
                )
            )
        except Exception:
            log.exception("subagent %s: its final status was not stored", self.id)
        log.info("subagent %s %s: %s", self.id, outcome.status, outcome.summary[:200])
        self.finished.set_result(outcome)
        self._on_finished(self)

    async def wait(self) -> Outcome:
        return await asyncio.shield(self.finished)


def _outcome_of(result: dict[str, object]) -> Outcome:
    ok = result.get("subtype") == "success" and not result.get("is_error")
    text = result.get("result")
    if not isinstance(text, str):
        errors = result.get("errors")
        text = (
            "; ".join(map(str, errors)) if isinstance(errors, list) else str(result.get("subtype"))
        )
    return Outcome("completed", text, 0) if ok else Outcome("failed", text, 1)
