"""Running an orchestration plan (SAG-05, 08, 09, 19): the scheduler decides, this module acts.

Every ready step is spawned as a subagent (its prompt after the result summaries of the steps
it depends on); each end is stored — the step's state, its summary or error, the steps its
failure blocks — before the next steps start, and told to watchers as OrchestrationEvents.
After a daemon restart `Orchestration.load` rebuilds the plan from its rows: completed steps
stay completed, a step whose subagent was running resumes that subagent's session (runner.py),
so no step runs twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.sessions.session import STREAMS_ENDED, StreamsEnded
from betcode.storage import subagents as rows
from betcode.storage.writer import StoreWriter
from betcode.subagents.admission import SpawnRequest
from betcode.subagents.limits import AutoApproveLimits
from betcode.subagents.manager import SubagentManager
from betcode.subagents.plan import StepSpec, Strategy, prompt_with_context
from betcode.subagents.runner import Outcome
from betcode.subagents.scheduler import Scheduler, StepState
from betcode.v1 import subagent_pb2 as pb

log = logging.getLogger(__name__)


class Orchestration:
    def __init__(
        self,
        orchestration_id: str,
        parent_session_id: str,
        steps: Sequence[StepSpec],
        manager: SubagentManager,
        writer: StoreWriter,
        *,
        states: dict[str, StepState] | None = None,
        summaries: dict[str, str] | None = None,
        subagents: dict[str, rows.SubagentRow] | None = None,
    ) -> None:
        self.id = orchestration_id
        self.parent_session_id = parent_session_id
        self.steps = {step.id: step for step in steps}
        self.scheduler = Scheduler(steps, states)
        self.summaries = dict(summaries or {})
        self._subagents = dict(subagents or {})  # step id → its subagent (a resumed plan)
        self._manager = manager
        self._writer = writer
        self.history: list[pb.OrchestrationEvent] = []
        self._listeners: set[asyncio.Queue[pb.OrchestrationEvent | None]] = set()
        self.watches_ended = False  # end_watches: the daemon is stopping
        self.task: asyncio.Task[None] | None = None
        self.running_subagents: dict[str, str] = {}  # step id → its running subagent's id
        self.cancel_reason: str | None = None  # set: no step starts any more

    @classmethod
    async def create(
        cls,
        parent_session_id: str,
        steps: Sequence[StepSpec],
        strategy: Strategy,
        manager: SubagentManager,
        writer: StoreWriter,
    ) -> Orchestration:
        orchestration_id = f"orch-{uuid.uuid4()}"
        stored = [_step_row(step) for step in steps]
        await writer.call(
            lambda c: rows.insert_orchestration(
                c, orchestration_id, parent_session_id, strategy.value, stored, time.time()
            )
        )
        return cls(orchestration_id, parent_session_id, steps, manager, writer)

    @classmethod
    def load(
        cls,
        row: rows.OrchestrationRow,
        subagents: Sequence[rows.SubagentRow],
        manager: SubagentManager,
        writer: StoreWriter,
    ) -> Orchestration:
        steps = [_step_spec(step) for step in row.steps]
        by_step = {s.step_id: s for s in subagents if s.step_id}
        states = {}
        for step in row.steps:
            state = StepState(step.status)
            # Started, but the daemon stopped before the step's row said so: resume it.
            if state is StepState.PENDING and step.step_key in by_step:
                state = StepState.RUNNING
            states[step.step_key] = state
        summaries = {s.step_key: s.result_summary or "" for s in row.steps if s.result_summary}
        return cls(
            row.id,
            row.parent_session_id,
            steps,
            manager,
            writer,
            states=states,
            summaries=summaries,
            subagents=by_step,
        )

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"orchestration-{self.id}")

    async def _run(self) -> None:
        running: dict[asyncio.Task[Outcome], str] = {}
        for step_id in self.scheduler.running():  # interrupted by a restart
            running[self._start_step(step_id)] = step_id
        while True:
            for step_id in [] if self.cancel_reason is not None else self.scheduler.ready():
                running[self._start_step(step_id)] = step_id
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                step_id = running.pop(task)
                await self._step_ended(step_id, _outcome(task))
        await self._finish()

    def _start_step(self, step_id: str) -> asyncio.Task[Outcome]:
        return asyncio.create_task(self._run_step(step_id), name=f"{self.id}/{step_id}")

    async def _run_step(self, step_id: str) -> Outcome:
        existing = self._subagents.get(step_id)
        if existing is not None and existing.status not in rows.UNFINISHED:
            return _outcome_of_row(existing)
        step = self.steps[step_id]
        if existing is not None:
            run = await self._manager.resume(existing)
        else:
            finished = [(self.steps[d].label, self.summaries.get(d, "")) for d in step.depends_on]
            run = await self._manager.spawn(
                SpawnRequest(
                    parent_session_id=self.parent_session_id,
                    prompt=prompt_with_context(step.prompt, finished),
                    model=step.model,
                    working_directory=step.working_directory,
                    allowed_tools=step.allowed_tools,
                    max_turns=step.max_turns,
                    env=step.env,
                    name=step.label,
                    auto_approve=step.auto_approve,
                    limits=step.limits or AutoApproveLimits(),
                    worktree=step.worktree,
                    orchestration_id=self.id,
                    step_id=step_id,
                )
            )
        self.running_subagents[step_id] = run.id
        await self._writer.call(
            lambda c: rows.set_step(c, self.id, step_id, "running", time.time(), subagent_id=run.id)
        )
        self._emit(
            pb.OrchestrationEvent(
                step_started=pb.StepStarted(step_id=step_id, subagent_id=run.id, name=step.label)
            )
        )
        return await run.wait()

    async def _step_ended(self, step_id: str, outcome: Outcome) -> None:
        self.running_subagents.pop(step_id, None)
        now = time.time()
        if outcome.status == "completed":
            self.scheduler.complete(step_id)
            self.summaries[step_id] = outcome.summary
            await self._writer.call(
                lambda c: rows.set_step(
                    c, self.id, step_id, "completed", now, result_summary=outcome.summary
                )
            )
            self._emit(
                pb.OrchestrationEvent(
                    step_completed=pb.StepCompleted(
                        step_id=step_id,
                        result_summary=outcome.summary,
                        completed_count=self.scheduler.count(StepState.COMPLETED),
                        total_count=len(self.steps),
                    )
                )
            )
            return
        blocked = self.scheduler.fail(step_id)
        reason = f"dependency {step_id} failed"

        def store(conn: object) -> None:
            rows.set_step(conn, self.id, step_id, "failed", now, error_message=outcome.summary)  # type: ignore[arg-type]
            for other in blocked:
                rows.set_step(conn, self.id, other, "blocked", now, error_message=reason)  # type: ignore[arg-type]

        await self._writer.call(store)
        self._emit(
            pb.OrchestrationEvent(
                step_failed=pb.StepFailed(
                    step_id=step_id, error_message=outcome.summary, blocked_steps=blocked
                )
            )
        )

    async def _finish(self) -> None:
        completed = self.scheduler.count(StepState.COMPLETED)
        failed = len(self.steps) - completed
        status: rows.OrchestrationStatus = "completed" if failed == 0 else "failed"
        error = None if failed == 0 else f"{failed} of {len(self.steps)} steps did not complete"
        if self.cancel_reason is not None and failed:
            error = f"cancelled: {self.cancel_reason}" if self.cancel_reason else "cancelled"
            await self._block_unstarted(error)
        await self._writer.call(
            lambda c: rows.finish_orchestration(
                c, self.id, status, completed, failed, time.time(), error
            )
        )
        if failed == 0:
            event = pb.OrchestrationEvent(
                completed=pb.OrchestrationCompleted(
                    total_steps=len(self.steps), succeeded=completed, failed=0
                )
            )
        else:
            event = pb.OrchestrationEvent(
                failed=pb.OrchestrationFailed(
                    error_message=error or "", completed_steps=completed, failed_steps=failed
                )
            )
        self._emit(event)
        for queue in self._listeners:
            queue.put_nowait(None)
        log.info("orchestration %s %s (%d/%d steps)", self.id, status, completed, len(self.steps))

    async def _block_unstarted(self, reason: str) -> None:
        """A cancelled plan's steps that never started are stored blocked, saying why."""
        unstarted = [
            s for s in self.scheduler.order if self.scheduler.state[s] is StepState.PENDING
        ]
        now = time.time()

        def store(conn: sqlite3.Connection) -> None:
            for step_id in unstarted:
                rows.set_step(conn, self.id, step_id, "blocked", now, error_message=reason)

        await self._writer.call(store)

    def _emit(self, event: pb.OrchestrationEvent) -> None:
        event.orchestration_id = self.id
        stamp = Timestamp()
        stamp.GetCurrentTime()
        event.timestamp.CopyFrom(stamp)
        self.history.append(event)
        for queue in self._listeners:
            queue.put_nowait(event)

    def end_watches(self) -> None:
        """The daemon is stopping: every watch ends now, raising StreamsEnded (the plan goes on
        at the next start, where its watchers reconnect)."""
        self.watches_ended = True
        for queue in self._listeners:
            queue.put_nowait(None)

    async def watch(self) -> AsyncIterator[pb.OrchestrationEvent]:
        """Everything so far, then live until the plan ends."""
        queue: asyncio.Queue[pb.OrchestrationEvent | None] = asyncio.Queue()
        past = list(self.history)
        ended = self.task is not None and self.task.done()
        if not ended:
            self._listeners.add(queue)
        try:
            for event in past:
                yield event
            if ended:
                return
            while (live := await queue.get()) is not None:
                yield live
            if self.watches_ended:
                raise StreamsEnded(STREAMS_ENDED)
        finally:
            self._listeners.discard(queue)


def _outcome(task: asyncio.Task[Outcome]) -> Outcome:
    error = task.exception()
    if error is None:
        return task.result()
    return Outcome("failed", f"the step could not start: {error}", -1)


def _outcome_of_row(row: rows.SubagentRow) -> Outcome:
    if row.status == "completed":
        return Outcome("completed", row.result_summary or "", row.exit_code or 0)
    return Outcome("failed", row.error_message or row.result_summary or row.status, -1)


def _step_row(step: StepSpec) -> rows.StepRow:
    limits = step.limits
    return rows.StepRow(
        step_key=step.id,
        name=step.name,
        prompt=step.prompt,
        model=step.model,
        working_directory=step.working_directory,
        allowed_tools=list(step.allowed_tools),
        depends_on=list(step.depends_on),
        auto_approve=step.auto_approve,
        status="pending",
        subagent_id=None,
        result_summary=None,
        error_message=None,
        options={
            "max_turns": step.max_turns,
            "worktree": step.worktree,
            "env": dict(step.env),
            "limits": None if limits is None else dataclasses.asdict(limits),
        },
    )


def _step_spec(step: rows.StepRow) -> StepSpec:
    options = step.options
    limits = options.get("limits")
    return StepSpec(
        id=step.step_key,
        prompt=step.prompt,
        name=step.name,
        model=step.model,
        working_directory=step.working_directory,
        allowed_tools=tuple(step.allowed_tools),
        depends_on=tuple(step.depends_on),
        max_turns=int(options.get("max_turns", 0)),
        auto_approve=step.auto_approve,
        worktree=bool(options.get("worktree", False)),
        limits=AutoApproveLimits(**limits) if isinstance(limits, dict) else None,
        env=dict(options.get("env", {})),
    )
