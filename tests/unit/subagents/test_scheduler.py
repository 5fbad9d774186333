"""The orchestration scheduler and plan checks (SAG-08): table tests and random DAGs."""

from __future__ import annotations

import graphlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.subagents.plan import (
    MAX_STEPS,
    PlanError,
    StepSpec,
    Strategy,
    check_plan,
    find_cycle,
    prompt_with_context,
)
from betcode.subagents.scheduler import Scheduler, StepState


def steps(**deps: str) -> list[StepSpec]:
    """steps(a="", b="a", c="a,b") → a DAG of steps with those dependencies."""
    return [
        StepSpec(id=k, prompt=f"do {k}", depends_on=tuple(filter(None, v.split(","))))
        for k, v in deps.items()
    ]


def test_parallel_starts_every_step_at_once() -> None:
    plan = check_plan(steps(a="", b="", c=""), Strategy.PARALLEL)
    assert Scheduler(plan).ready() == ["a", "b", "c"]


def test_sequential_chains_the_steps_in_list_order() -> None:
    scheduler = Scheduler(check_plan(steps(b="", a="", c=""), Strategy.SEQUENTIAL))
    assert scheduler.ready() == ["b"]
    assert scheduler.ready() == []
    scheduler.complete("b")
    assert scheduler.ready() == ["a"]
    scheduler.complete("a")
    assert scheduler.ready() == ["c"]


def test_dag_diamond_waits_for_both_branches() -> None:
    scheduler = Scheduler(check_plan(steps(a="", b="a", c="a", d="b,c"), Strategy.DAG))
    assert scheduler.ready() == ["a"]
    scheduler.complete("a")
    assert scheduler.ready() == ["b", "c"]
    scheduler.complete("b")
    assert scheduler.ready() == []
    scheduler.complete("c")
    assert scheduler.ready() == ["d"]
    scheduler.complete("d")
    assert scheduler.finished
    assert scheduler.count(StepState.COMPLETED) == 4


def test_a_failure_blocks_its_transitive_dependants_and_independent_branches_go_on() -> None:
    scheduler = Scheduler(check_plan(steps(a="", b="a", c="b", x=""), Strategy.DAG))
    assert scheduler.ready() == ["a", "x"]
    assert scheduler.fail("a") == ["b", "c"]
    assert scheduler.state["b"] is StepState.BLOCKED
    scheduler.complete("x")
    assert scheduler.ready() == []
    assert scheduler.finished


@pytest.mark.parametrize(
    ("plan", "strategy", "code", "says"),
    [
        (steps(a="b", b="a"), Strategy.DAG, "DAG_CYCLE", "a → b → a"),
        (steps(a="a"), Strategy.DAG, "DAG_CYCLE", "a → a"),
        (steps(a="", b="c,a", c="d", d="b"), Strategy.DAG, "DAG_CYCLE", "b → c → d → b"),
        (steps(a="nope"), Strategy.DAG, "INVALID_ARGUMENT", "unknown steps ['nope']"),
        (steps(a="", b="a"), Strategy.PARALLEL, "INVALID_ARGUMENT", "only the dag strategy"),
        ([], Strategy.DAG, "INVALID_ARGUMENT", "at least one step"),
        ([StepSpec("a", "x"), StepSpec("a", "y")], Strategy.DAG, "INVALID_ARGUMENT", "twice"),
        ([StepSpec("a b", "x")], Strategy.DAG, "INVALID_ARGUMENT", "no spaces"),
        ([StepSpec("a", " ")], Strategy.DAG, "INVALID_ARGUMENT", "empty prompt"),
        (
            [StepSpec(f"s{n}", "x") for n in range(MAX_STEPS + 1)],
            Strategy.PARALLEL,
            "INVALID_ARGUMENT",
            "at most 50",
        ),
    ],
)
def test_bad_plans_are_refused_before_anything_starts(
    plan: list[StepSpec], strategy: Strategy, code: str, says: str
) -> None:
    with pytest.raises(PlanError) as refused:
        check_plan(plan, strategy)
    assert refused.value.code == code
    assert says in str(refused.value)


def test_fifty_steps_are_allowed() -> None:
    plan = [StepSpec(f"s{n}", "x") for n in range(MAX_STEPS)]
    assert len(check_plan(plan, Strategy.SEQUENTIAL)) == MAX_STEPS


def test_stored_states_resume_a_plan_and_re_block_after_a_failure() -> None:
    plan = check_plan(steps(a="", b="a", c="", d="c"), Strategy.DAG)
    scheduler = Scheduler(
        plan, {"a": StepState.COMPLETED, "b": StepState.RUNNING, "c": StepState.FAILED}
    )
    assert scheduler.state["d"] is StepState.BLOCKED
    assert scheduler.running() == ["b"]
    assert scheduler.ready() == []


def test_dependants_prompts_start_with_the_summaries() -> None:
    text = prompt_with_context("combine", [("left", "L done"), ("right", "R done")])
    assert text.index("[left] L done") < text.index("[right] R done") < text.index("combine")
    assert prompt_with_context("alone", []) == "alone"


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[StepSpec], frozenset[str]]:
    count = draw(st.integers(1, 25))
    plan = []
    for n in range(count):
        earlier = [f"s{k}" for k in range(n)]
        deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=4)) if earlier else []
        plan.append(StepSpec(f"s{n}", "x", depends_on=tuple(deps)))
    order = draw(st.permutations(plan))
    failing = draw(st.frozensets(st.sampled_from([s.id for s in plan]), max_size=3))
    return list(order), failing


@given(random_dags())
def test_random_dags_run_each_step_once_after_its_dependencies(
    dag: tuple[list[StepSpec], frozenset[str]],
) -> None:
    plan, failing = dag
    assert find_cycle({s.id: s.depends_on for s in plan}) == []
    scheduler = Scheduler(check_plan(plan, Strategy.DAG))
    finished: set[str] = set()
    started: list[str] = []
    while not scheduler.finished:
        ready = scheduler.ready()
        assert ready, "a plan that is not finished always has a step to start"
        for step_id in ready:
            spec = scheduler.steps[step_id]
            assert all(d in finished for d in spec.depends_on)
            assert not any(d in failing for d in spec.depends_on)
            started.append(step_id)
            if step_id in failing:
                scheduler.fail(step_id)
            else:
                scheduler.complete(step_id)
                finished.add(step_id)
    assert len(started) == len(set(started))
    for spec in plan:
        state = scheduler.state[spec.id]
        assert (state is StepState.BLOCKED) == (spec.id not in started)


@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=20))
def test_find_cycle_returns_a_real_cycle_or_the_graph_has_none(
    edges: list[tuple[int, int]],
) -> None:
    graph: dict[str, list[str]] = {f"n{k}": [] for k in range(9)}
    for a, b in edges:
        graph[f"n{a}"].append(f"n{b}")
    cycle = find_cycle(graph)
    if cycle:
        assert cycle[0] == cycle[-1]
        assert all(b in graph[a] for a, b in itertools.pairwise(cycle))
    else:
        graphlib.TopologicalSorter(graph).prepare()  # raises CycleError if there is one
