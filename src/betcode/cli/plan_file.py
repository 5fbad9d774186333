"""An orchestration plan file (`betcode orchestrate PLAN_FILE`), JSON or YAML, read into the
wire request. Every field is checked here — an unknown key, a wrong type — so a bad file is
refused (exit 5) naming the step and field; the daemon then checks the plan as a whole
(cycles, unknown dependencies, at most 50 steps).

    parent_session_id: 3f6c…        # optional: `--parent`, else a new session in the cwd
    strategy: dag                   # parallel | sequential | dag (default dag)
    steps:
      - id: tests
        prompt: Run the test suite and summarise the failures.
        depends_on: [build]
        model: claude-haiku-4-5
        allowed_tools: [Bash, Read]
        auto_approve: false
        worktree: false
        max_turns: 20
        name: test run
        working_directory: /abs/path
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from betcode.v1 import subagent_pb2 as pb

STRATEGIES = {
    "parallel": pb.ORCHESTRATION_STRATEGY_PARALLEL,
    "sequential": pb.ORCHESTRATION_STRATEGY_SEQUENTIAL,
    "dag": pb.ORCHESTRATION_STRATEGY_DAG,
}
_TEXT = ("id", "name", "prompt", "model", "working_directory")
_LISTS = ("allowed_tools", "depends_on")
_FLAGS = ("auto_approve", "worktree")
STEP_FIELDS = frozenset({*_TEXT, *_LISTS, *_FLAGS, "max_turns"})
PLAN_FIELDS = frozenset({"parent_session_id", "strategy", "steps"})


class PlanFileError(ValueError):
    """A plan file that cannot be read as a plan (exit 5)."""


Plan = tuple[str, "pb.OrchestrationStrategy.ValueType", list[pb.OrchestrationStep]]


def read_plan(path: Path) -> Plan:
    """(parent session id or "", strategy, steps) of the plan file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise PlanFileError(f"cannot read {path}: {error.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise PlanFileError(f"{path} is not valid JSON or YAML: {error}") from None
    return plan_from(data, str(path))


def plan_from(data: Any, where: str) -> Plan:
    if not isinstance(data, dict):
        raise PlanFileError(f"{where}: a plan is an object with `steps`")
    unknown = sorted(set(data) - PLAN_FIELDS)
    if unknown:
        raise PlanFileError(f"{where}: unknown fields {unknown} (allowed: {sorted(PLAN_FIELDS)})")
    strategy_name = data.get("strategy", "dag")
    if strategy_name not in STRATEGIES:
        raise PlanFileError(f"{where}: strategy must be one of {', '.join(STRATEGIES)}")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise PlanFileError(f"{where}: `steps` must be a non-empty list")
    parent = data.get("parent_session_id", "")
    if not isinstance(parent, str):
        raise PlanFileError(f"{where}: parent_session_id must be text")
    return (
        parent,
        STRATEGIES[strategy_name],
        [_step(s, f"{where} step {n + 1}") for n, s in enumerate(steps)],
    )


def _step(data: Any, where: str) -> pb.OrchestrationStep:
    if not isinstance(data, dict):
        raise PlanFileError(f"{where}: a step is an object")
    where = f"{where} ({data['id']})" if isinstance(data.get("id"), str) else where
    unknown = sorted(set(data) - STEP_FIELDS)
    if unknown:
        raise PlanFileError(f"{where}: unknown fields {unknown} (allowed: {sorted(STEP_FIELDS)})")
    step = pb.OrchestrationStep()
    for name, value in data.items():
        if name in _TEXT:
            setattr(step, name, _typed(value, str, where, name, "text"))
        elif name in _LISTS:
            items = _typed(value, list, where, name, "a list of text")
            if not all(isinstance(item, str) for item in items):
                raise PlanFileError(f"{where}: {name} must be a list of text")
            getattr(step, name).extend(items)
        elif name in _FLAGS:
            setattr(step, name, _typed(value, bool, where, name, "true or false"))
        else:
            turns = _typed(value, int, where, name, "a whole number")
            if isinstance(turns, bool) or not 0 <= turns <= 200:
                raise PlanFileError(f"{where}: max_turns must be 0 to 200")
            step.max_turns = turns
    if not step.id or not step.prompt:
        raise PlanFileError(f"{where}: every step needs an id and a prompt")
    return step


def _typed(value: Any, kind: type, where: str, name: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise PlanFileError(f"{where}: {name} must be {what}, got {value!r}")
    return value
