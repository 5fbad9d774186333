"""The DAG scheduler of one orchestration (SAG-08): which steps may start, what a failure blocks.

Pure bookkeeping, no I/O (the orchestrator starts and stores; tests drive this directly):
every step whose dependencies all completed is ready; a failed step blocks its transitive
dependants while independent branches go on. It can be built from stored states, so a plan
interrupted by a daemon restart continues where it stopped.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from betcode.subagents.plan import StepSpec


class StepState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"


FINAL = frozenset({StepState.COMPLETED, StepState.FAILED, StepState.BLOCKED})


class Scheduler:
    def __init__(
        self, steps: Sequence[StepSpec], states: Mapping[str, StepState] | None = None
    ) -> None:
        self.steps = {step.id: step for step in steps}
        self.order = [step.id for step in steps]
        self.state = {step.id: StepState.PENDING for step in steps}
        self.state.update(states or {})
        self._dependants: dict[str, list[str]] = {step_id: [] for step_id in self.order}
        for step in steps:
            for dependency in step.depends_on:
                self._dependants[dependency].append(step.id)
        # A restart between a failure and the blocking of its dependants: block them now.
        for step_id in self.order:
            if self.state[step_id] in (StepState.FAILED, StepState.BLOCKED):
                self._block_dependants(step_id)

    def ready(self) -> list[str]:
        """Pending steps whose dependencies all completed, marked RUNNING, in plan order."""
        ready = [
            step_id
            for step_id in self.order
            if self.state[step_id] is StepState.PENDING
            and all(self.state[d] is StepState.COMPLETED for d in self.steps[step_id].depends_on)
        ]
        for step_id in ready:
            self.state[step_id] = StepState.RUNNING
        return ready

    def running(self) -> list[str]:
        return [s for s in self.order if self.state[s] is StepState.RUNNING]

    def complete(self, step_id: str) -> None:
        self._finish(step_id, StepState.COMPLETED)

    def fail(self, step_id: str) -> list[str]:
        """Marks `step_id` failed; returns the dependants this newly blocks, in plan order."""
        self._finish(step_id, StepState.FAILED)
        return self._block_dependants(step_id)

    def _finish(self, step_id: str, state: StepState) -> None:
        if self.state[step_id] is not StepState.RUNNING:
            raise ValueError(f"step {step_id!r} is {self.state[step_id]}, not running")
        self.state[step_id] = state

    def _block_dependants(self, step_id: str) -> list[str]:
        blocked: list[str] = []
        frontier = list(self._dependants[step_id])
        while frontier:
            dependant = frontier.pop()
            if self.state[dependant] is StepState.PENDING:
                self.state[dependant] = StepState.BLOCKED
                blocked.append(dependant)
                frontier.extend(self._dependants[dependant])
        return sorted(blocked, key=self.order.index)

    @property
    def finished(self) -> bool:
        return all(state in FINAL for state in self.state.values())

    def count(self, state: StepState) -> int:
        return sum(1 for s in self.state.values() if s is state)
