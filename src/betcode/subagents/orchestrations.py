"""The daemon's orchestrations: created (the whole plan checked first), watched, resumed at
startup after a restart, and left unrecorded at shutdown so they resume next time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from betcode.storage import subagents as rows
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.subagents.manager import SubagentManager
from betcode.subagents.orchestrator import Orchestration
from betcode.subagents.plan import PlanError, StepSpec, Strategy, check_plan
from betcode.v1 import subagent_pb2 as pb

log = logging.getLogger(__name__)


class OrchestrationNotFound(LookupError):
    def __init__(self, orchestration_id: str) -> None:
        super().__init__(f"no orchestration with id {orchestration_id!r}")


class Orchestrations:
    """The daemon's orchestrations: created, watched, resumed at startup, left at shutdown."""

    def __init__(self, manager: SubagentManager, writer: StoreWriter, reader: StoreReader) -> None:
        self._manager = manager
        self._writer = writer
        self._reader = reader
        self.live: dict[str, Orchestration] = {}

    async def create(
        self, parent_session_id: str, steps: Sequence[StepSpec], strategy: Strategy
    ) -> Orchestration:
        """Checks the whole plan (PlanError, DelegationError, SubagentRefused) before any
        step starts, then stores and starts it."""
        parent = await self._manager.sessions.get(parent_session_id)
        planned = check_plan(steps, strategy)
        for step in planned:
            await self._manager.admission.check_step(step, parent.record.working_directory)
        orchestration = await Orchestration.create(
            parent_session_id, planned, strategy, self._manager, self._writer
        )
        self._begin(orchestration)
        return orchestration

    def _begin(self, orchestration: Orchestration) -> None:
        self.live[orchestration.id] = orchestration
        orchestration.start()

    async def load_interrupted(self) -> int:
        """Startup, before the daemon serves: every orchestration a restart interrupted is
        rebuilt from its rows and registered, so a WatchOrchestration from the first moment
        on follows it live (not its stored rows, which would end the stream mid-plan)."""
        ids = await self._reader.read(rows.unfinished_orchestrations)
        for orchestration_id in ids:
            row, subagents = await self._reader.read(
                lambda c, o=orchestration_id: (  # type: ignore[misc]
                    rows.get_orchestration(c, o),
                    rows.subagents_of_orchestration(c, o),
                )
            )
            if row is None:
                continue
            loaded = Orchestration.load(row, subagents, self._manager, self._writer)
            self.live[orchestration_id] = loaded
        return len(ids)

    def resume_loaded(self) -> None:
        """Startup, once the daemon serves: the loaded orchestrations go on."""
        for orchestration in self.live.values():
            if orchestration.task is None:
                log.info("orchestration %s resumes after the restart", orchestration.id)
                orchestration.start()

    async def watch(self, orchestration_id: str) -> AsyncIterator[pb.OrchestrationEvent]:
        live = self.live.get(orchestration_id)
        if live is not None:
            async for event in live.watch():
                yield event
            return
        row = await self._reader.read(lambda c: rows.get_orchestration(c, orchestration_id))
        if row is None:
            raise OrchestrationNotFound(orchestration_id)
        for event in settled_events(row):
            yield event

    async def cancel(
        self, orchestration_id: str, reason: str, stop: Callable[[str], Awaitable[object]]
    ) -> bool:
        """Stops a running plan: no step starts any more, `stop` cancels each running step's
        subagent (by id), and the plan ends failed, its unstarted steps blocked. False when the
        plan had ended already."""
        live = self.live.get(orchestration_id)
        if live is None or live.task is None or live.task.done():
            await self._row(orchestration_id)  # OrchestrationNotFound for an unknown one
            return False
        live.cancel_reason = reason
        for subagent_id in list(live.running_subagents.values()):
            await stop(subagent_id)
        await asyncio.gather(live.task, return_exceptions=True)
        return True

    async def retry(self, orchestration_id: str, step_ids: Sequence[str]) -> list[str]:
        """Runs again the failed steps `step_ids` (default: every failed one) of an ended plan,
        and the steps blocked only by them; returns the steps that run again, in plan order."""
        live = self.live.get(orchestration_id)
        if live is not None and (live.task is None or not live.task.done()):
            raise PlanError("PRECONDITION_FAILED", f"plan {orchestration_id} is still running")
        row = await self._row(orchestration_id)
        status = {step.step_key: step.status for step in row.steps}
        failed = [key for key, state in status.items() if state == "failed"]
        chosen = list(step_ids) or failed
        not_failed = [key for key in chosen if status.get(key) != "failed"]
        if not_failed:
            raise PlanError(
                "INVALID_ARGUMENT",
                f"only failed steps can be retried; not failed: {', '.join(not_failed)} "
                f"(failed: {', '.join(failed) or 'none'})",
            )
        if not chosen and not any(state == "blocked" for state in status.values()):
            raise PlanError("PRECONDITION_FAILED", f"plan {orchestration_id} has nothing to retry")
        again = set(chosen)
        depends = {step.step_key: step.depends_on for step in row.steps}
        grew = True
        while grew:  # a blocked step runs again once each dependency completed or runs again
            unblocked = {
                key
                for key, state in status.items()
                if state == "blocked"
                and key not in again
                and all(status[d] == "completed" or d in again for d in depends[key])
            }
            again |= unblocked
            grew = bool(unblocked)
        await self._writer.call(lambda c: rows.reset_steps(c, orchestration_id, again))
        reset, subagents = await self._reader.read(
            lambda c: (
                rows.get_orchestration(c, orchestration_id),
                rows.subagents_of_orchestration(c, orchestration_id),
            )
        )
        assert reset is not None  # just updated; orchestrations are deleted only with their parent
        self._begin(Orchestration.load(reset, subagents, self._manager, self._writer))
        return [step.step_key for step in row.steps if step.step_key in again]

    async def _row(self, orchestration_id: str) -> rows.OrchestrationRow:
        row = await self._reader.read(lambda c: rows.get_orchestration(c, orchestration_id))
        if row is None:
            raise OrchestrationNotFound(orchestration_id)
        return row

    def end_watches(self) -> None:
        """The daemon is stopping: every plan's watchers are let go now (StreamsEnded)."""
        for orchestration in self.live.values():
            orchestration.end_watches()

    async def shutdown(self) -> None:
        """Daemon stop: plans and their subagents stop without recording an end, so they
        resume at the next start."""
        tasks = [o.task for o in self.live.values() if o.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._manager.abandon_all()


def settled_events(row: rows.OrchestrationRow) -> list[pb.OrchestrationEvent]:
    """A stored orchestration told as events (one watched after it ended, or after a restart)."""
    events = []
    done = 0
    for step in row.steps:
        if step.status == "completed":
            done += 1
            events.append(
                pb.OrchestrationEvent(
                    step_completed=pb.StepCompleted(
                        step_id=step.step_key,
                        result_summary=step.result_summary or "",
                        completed_count=done,
                        total_count=row.total_steps,
                    )
                )
            )
        elif step.status == "failed":
            blocked = [s.step_key for s in row.steps if s.status == "blocked"]
            events.append(
                pb.OrchestrationEvent(
                    step_failed=pb.StepFailed(
                        step_id=step.step_key,
                        error_message=step.error_message or "",
                        blocked_steps=blocked,
                    )
                )
            )
    if row.status == "completed":
        events.append(
            pb.OrchestrationEvent(
                completed=pb.OrchestrationCompleted(
                    total_steps=row.total_steps, succeeded=row.completed_steps, failed=0
                )
            )
        )
    elif row.status == "failed":
        events.append(
            pb.OrchestrationEvent(
                failed=pb.OrchestrationFailed(
                    error_message=row.error_message or "",
                    completed_steps=row.completed_steps,
                    failed_steps=row.failed_steps,
                )
            )
        )
    for event in events:
        event.orchestration_id = row.id
    return events
