"""Orchestration plans: what a step is, and the checks a plan passes before anything starts.

Pure functions (table-tested in tests/unit/subagents): a plan is refused as a whole — too many
steps, a bad or repeated id, an unknown dependency (INVALID_ARGUMENT) or a cycle (DAG_CYCLE) —
and the strategy is turned into explicit dependencies: PARALLEL has none, SEQUENTIAL chains the
steps in list order, DAG keeps the given ones.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from betcode.subagents.limits import AutoApproveLimits

MAX_STEPS = 50
MAX_ID_CHARS = 128


class Strategy(enum.StrEnum):
    PARALLEL = "parallel"
    SEQUENTIAL = "sequential"
    DAG = "dag"


class PlanError(ValueError):
    """A plan refused before any step starts; `code` is INVALID_ARGUMENT or DAG_CYCLE."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class StepSpec:
    id: str
    prompt: str
    name: str = ""
    model: str = ""
    working_directory: str = ""
    allowed_tools: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    max_turns: int = 0
    auto_approve: bool = False
    worktree: bool = False
    limits: AutoApproveLimits | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.id


def check_plan(steps: Sequence[StepSpec], strategy: Strategy) -> list[StepSpec]:
    """The plan's steps with their effective dependencies; raises PlanError."""
    if not steps:
        raise PlanError("INVALID_ARGUMENT", "an orchestration needs at least one step")
    if len(steps) > MAX_STEPS:
        raise PlanError(
            "INVALID_ARGUMENT", f"the plan has {len(steps)} steps; at most {MAX_STEPS} allowed"
        )
    seen: set[str] = set()
    for step in steps:
        _check_id(step.id)
        if step.id in seen:
            raise PlanError("INVALID_ARGUMENT", f"step id {step.id!r} appears twice")
        seen.add(step.id)
        if not step.prompt.strip():
            raise PlanError("INVALID_ARGUMENT", f"step {step.id!r} has an empty prompt")
    if strategy is not Strategy.DAG:
        with_deps = [s.id for s in steps if s.depends_on]
        if with_deps:
            raise PlanError(
                "INVALID_ARGUMENT",
                f"steps {with_deps} name depends_on, which only the dag strategy uses "
                f"(the {strategy.value} strategy orders steps itself)",
            )
    if strategy is Strategy.SEQUENTIAL:
        return [
            replace(step, depends_on=(steps[i - 1].id,) if i else ())
            for i, step in enumerate(steps)
        ]
    if strategy is Strategy.DAG:
        for step in steps:
            unknown = [d for d in step.depends_on if d not in seen]
            if unknown:
                raise PlanError(
                    "INVALID_ARGUMENT", f"step {step.id!r} depends on unknown steps {unknown}"
                )
        cycle = find_cycle({s.id: s.depends_on for s in steps})
        if cycle:
            raise PlanError("DAG_CYCLE", "the plan has a dependency cycle: " + " → ".join(cycle))
    return list(steps)


def _check_id(step_id: str) -> None:
    if not step_id:
        raise PlanError("INVALID_ARGUMENT", "every step needs an id")
    if len(step_id) > MAX_ID_CHARS:
        raise PlanError("INVALID_ARGUMENT", f"step id {step_id[:20]!r}… is over {MAX_ID_CHARS}")
    if not step_id.isprintable() or any(ch.isspace() for ch in step_id):
        raise PlanError("INVALID_ARGUMENT", f"step id {step_id!r} must be printable, no spaces")


def find_cycle(depends_on: Mapping[str, Iterable[str]]) -> list[str]:
    """One dependency cycle as a path that returns to its start ([] if there is none)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(depends_on, WHITE)
    for root in depends_on:
        if colour[root] != WHITE:
            continue
        path: list[str] = [root]
        stack = [iter(depends_on[root])]
        colour[root] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour.get(nxt, BLACK) == GREY:
                return [*path[path.index(nxt) :], nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(depends_on[nxt]))
    return []


def prompt_with_context(prompt: str, finished: Sequence[tuple[str, str]]) -> str:
    """The step's prompt after the result summaries of the steps it depends on (SAG-09)."""
    if not finished:
        return prompt
    parts = ["Results of the steps this one depends on:"]
    parts += [f"[{label}] {summary.strip()}" for label, summary in finished]
    return "\n\n".join([*parts, "Your task:", prompt])
