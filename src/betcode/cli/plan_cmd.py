"""`betcode orchestrate [run] PLAN_FILE | list | watch PLAN | cancel PLAN | retry PLAN [STEP]`:
plans of subagent steps that run in the daemon, and coming back to them.

A plan runs in the daemon, not in the command: stopping the command (Ctrl-C) stops only the
watching, and `orchestrate watch PLAN` picks it up again (everything so far, then live). Exit
codes: 0 every step completed, 1 a step failed (its dependants were blocked) or the watching
was interrupted, 5 a plan refused before it started (a bad file, a cycle, an unknown
dependency), 6 no such plan or parent session, 2 the daemon cannot be reached.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from betcode.cli.connection import DaemonClient
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.exit_codes import ExitCode
from betcode.cli.ids import PLANS, SESSIONS, session_id_of, short_id
from betcode.cli.plan_file import STRATEGIES, PlanFileError, read_plan
from betcode.cli.sessions_cmd import table
from betcode.cli.subagent_cmd import streamed, subagents
from betcode.v1 import agent_pb2, subagent_pb2

EXIT_STEP_FAILED = ExitCode.AGENT_ERROR
EXIT_INVALID_PLAN = ExitCode.INVALID_ARGUMENTS

PLAN_FORMAT = """\b
A plan file is JSON or YAML:
  parent_session_id: 3f6c...   # optional: --parent, else a new session here
                               # named "plan FILE", where step questions wait
  strategy: dag                # parallel | sequential | dag (default dag)
  steps:
    - id: build                # required, unique
      prompt: Build it.        # required
    - id: tests
      prompt: Run the tests and summarise the failures.
      depends_on: [build]      # dag: starts once these completed
      name: test run           # shown with its questions
      model: claude-haiku-4-5
      allowed_tools: [Bash, Read]
      auto_approve: false      # approve calls of allowed_tools within limits
      worktree: false          # true: run in a git worktree of its own
      max_turns: 20            # model calls per turn, 0 to 200
      working_directory: /abs/path
A step's result is passed on to the steps that depend on it.
"""


class PlanGroup(click.Group):
    """`orchestrate PLAN_FILE` (no sub-command named) is `orchestrate run PLAN_FILE`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("orchestrate", cls=PlanGroup, epilog=PLAN_FORMAT)
def orchestrate() -> None:
    """Run a plan of subagent steps (`orchestrate PLAN_FILE`); list, watch, cancel or retry
    plans.

    Steps run as subagents of a parent session, at once (parallel), one after another
    (sequential) or as their dependencies allow (dag). The plan runs in the daemon: Ctrl-C
    stops only the watching."""


json_option = click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")


@orchestrate.command("run", epilog=PLAN_FORMAT)
@click.argument("plan_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--parent",
    "parent_session_id",
    default="",
    shell_complete=SESSIONS.complete,
    help="The parent session: id, unique prefix or name (default: the plan's, else a new one).",
)
@click.option(
    "--strategy", type=click.Choice(sorted(STRATEGIES)), help="Overrides the plan's strategy."
)
@click.option("--watch", "live", is_flag=True, help="Show each step's state as it changes.")
@json_option
@socket_option
def run(
    plan_file: Path,
    parent_session_id: str,
    strategy: str | None,
    live: bool,
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Run the steps of PLAN_FILE as subagents and wait for the plan to end."""
    try:
        planned_parent, planned_strategy, steps = read_plan(plan_file)
    except PlanFileError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_INVALID_PLAN)
    chosen = STRATEGIES[strategy] if strategy else planned_strategy
    started: list[str] = []  # the plan's id once the daemon has it (for an interruption)

    async def act(client: DaemonClient) -> dict[str, Any]:
        named = parent_session_id or planned_parent
        if named:
            parent = await session_id_of(client, named)
        else:
            parent = await _plan_session(client, plan_file)
        created = await client.call(
            subagents(client).CreateOrchestration,
            subagent_pb2.CreateOrchestrationRequest(
                parent_session_id=parent, steps=steps, strategy=chosen
            ),
        )
        started.append(created.orchestration_id)
        click.echo(f"plan {created.orchestration_id} started ({len(steps)} steps)", err=True)
        return await _follow(client, created.orchestration_id, live and not as_json)

    _show_result(_watching(socket_path, act, started), as_json)


@orchestrate.command("watch")
@click.argument("plan", shell_complete=PLANS.complete)
@click.option("--quiet", is_flag=True, help="Only the end, not each step as it changes.")
@json_option
@socket_option
def watch(plan: str, quiet: bool, as_json: bool, socket_path: str | None) -> None:
    """Follow PLAN (its id, or a unique start of it) until it ends: what happened so far,
    then each change as it comes."""
    started: list[str] = []

    async def act(client: DaemonClient) -> dict[str, Any]:
        found = await PLANS.find(client, plan)
        started.append(found.id)
        return await _follow(client, found.id, not quiet and not as_json)

    _show_result(_watching(socket_path, act, started), as_json)


@orchestrate.command("cancel")
@click.argument("plan", shell_complete=PLANS.complete)
@click.option("--reason", default="", help="Why (the running steps' subagents are told).")
@socket_option
def cancel(plan: str, reason: str, socket_path: str | None) -> None:
    """Stop PLAN: no step starts any more and the running ones are cancelled; the steps left
    can be run later with `orchestrate retry`."""

    async def act(client: DaemonClient) -> tuple[str, bool]:
        found = await PLANS.find(client, plan)
        request = subagent_pb2.CancelOrchestrationRequest(orchestration_id=found.id, reason=reason)
        response = await client.call(subagents(client).CancelOrchestration, request)
        return found.id, response.cancelled

    plan_id, cancelled = call_daemon(socket_path, act)
    if cancelled:
        click.echo(
            f"plan {plan_id} cancelled; `betcode orchestrate retry {short_id(plan_id)}` runs "
            "what is left"
        )
    else:
        click.echo(f"plan {plan_id} had already ended")


@orchestrate.command("retry")
@click.argument("plan", shell_complete=PLANS.complete)
@click.argument("steps", nargs=-1)
@click.option("--watch", "live", is_flag=True, help="Show each step's state as it changes.")
@json_option
@socket_option
def retry(
    plan: str, steps: tuple[str, ...], live: bool, as_json: bool, socket_path: str | None
) -> None:
    """Run again the failed STEPS of an ended PLAN (default: every failed step), and the steps
    they blocked, then wait for the plan to end."""
    started: list[str] = []

    async def act(client: DaemonClient) -> dict[str, Any]:
        found = await PLANS.find(client, plan)
        request = subagent_pb2.RetryOrchestrationRequest(orchestration_id=found.id, step_ids=steps)
        again = await client.call(subagents(client).RetryOrchestration, request)
        started.append(found.id)
        click.echo(f"plan {found.id} runs again: {', '.join(again.step_ids)}", err=True)
        return await _follow(client, found.id, live and not as_json)

    _show_result(_watching(socket_path, act, started), as_json)


@orchestrate.command("list")
@click.option(
    "--parent",
    "parent_session_id",
    default="",
    shell_complete=SESSIONS.complete,
    help="Only this session's plans.",
)
@json_option
@socket_option
def list_plans(parent_session_id: str, as_json: bool, socket_path: str | None) -> None:
    """Plans, newest first, with their steps' progress."""

    async def act(client: DaemonClient) -> Sequence[subagent_pb2.OrchestrationInfo]:
        parent = await session_id_of(client, parent_session_id)
        request = subagent_pb2.ListOrchestrationsRequest(parent_session_id=parent)
        response = await client.call(subagents(client).ListOrchestrations, request)
        return list(response.orchestrations)

    plans = call_daemon(socket_path, act)
    if as_json:
        click.echo(json.dumps([plan_json(plan) for plan in plans], indent=2))
        return
    if not plans:
        click.echo("No plans.")
        return
    rows = [
        (
            short_id(plan.id),
            plan.status,
            f"{plan.completed_steps}/{plan.total_steps}"
            + (f" ({plan.failed_steps} failed)" if plan.failed_steps else ""),
            plan.strategy,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(plan.created_at.seconds)),
            short_id(plan.parent_session_id),
            ", ".join(f"{s.id}:{s.status}" for s in plan.steps),
        )
        for plan in plans
    ]
    header = ("ID", "STATUS", "DONE", "STRATEGY", "CREATED", "PARENT", "STEPS")
    for line in table(header, rows):
        click.echo(line)


def plan_json(plan: subagent_pb2.OrchestrationInfo) -> dict[str, Any]:
    return {
        "orchestration_id": plan.id,
        "parent_session_id": plan.parent_session_id,
        "strategy": plan.strategy,
        "status": plan.status,
        "created_at": plan.created_at.seconds,
        "steps": [step_json(step) for step in plan.steps],
    }


def step_json(step: subagent_pb2.OrchestrationStepInfo) -> dict[str, Any]:
    return {
        "id": step.id,
        "status": step.status,
        "result_summary": step.result_summary,
        "error": step.error_message,
        "subagent_id": step.subagent_id,
        "session_id": step.session_id,
        "working_directory": step.working_directory,
        "worktree": step.worktree_name,
        "branch": step.branch,
    }


def _watching(socket_path: str | None, act: Any, started: list[str]) -> dict[str, Any]:
    """call_daemon(act); Ctrl-C says the plan goes on and how to watch it again."""
    try:
        result: dict[str, Any] = call_daemon(socket_path, act)
    except KeyboardInterrupt:
        if started:
            click.echo(
                f"\nStopped watching. Plan {started[0]} goes on in the daemon; watch it again "
                f"with `betcode orchestrate watch {short_id(started[0])}`.",
                err=True,
            )
        else:
            click.echo("\nInterrupted before the plan started.", err=True)
        sys.exit(EXIT_STEP_FAILED)
    return result


async def _follow(client: DaemonClient, plan_id: str, live: bool) -> dict[str, Any]:
    """Watch the plan to its end; its steps with where each ran."""
    board = _Board(plan_id, live)
    request = subagent_pb2.WatchOrchestrationRequest(orchestration_id=plan_id)
    async for event in streamed(client, subagents(client).WatchOrchestration(request)):
        board.update(event)
    found = await PLANS.find(client, plan_id)
    return {
        "orchestration_id": plan_id,
        "status": board.status,
        "steps": [step_json(step) for step in found.steps],
    }


def _show_result(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        for step in result["steps"]:
            summary = (step["result_summary"] or step["error"]).strip().splitlines()
            click.echo(f"{step['status']:9}  {step['id']}  {summary[0][:100] if summary else ''}")
            if step["session_id"]:
                click.echo(f"           {where_step_ran(step)}")
        click.echo(f"orchestration {result['orchestration_id']} {result['status']}")
    sys.exit(0 if result["status"] == "completed" else EXIT_STEP_FAILED)


def where_step_ran(step: dict[str, Any]) -> str:
    place = f"session {short_id(step['session_id'])}"
    if step["worktree"]:
        return f"{place}, worktree {step['worktree']} (branch {step['branch']})"
    return f"{place}, in {step['working_directory']}"


async def _plan_session(client: DaemonClient, plan_file: Path) -> str:
    """A parent session in the current directory, for a plan that named none: where its steps'
    questions wait. It is named after the plan file, so lists tell what it is."""
    call = client.open_converse()
    start = agent_pb2.StartConversation(working_directory=os.getcwd(), client_type="cli")
    await call.write(agent_pb2.AgentRequest(start=start))
    try:
        async for event in streamed(client, call):
            if event.HasField("session_info"):
                session_id = str(event.session_info.session_id)
                await client.rename_session(session_id, f"plan {plan_file.name}")
                return session_id
    finally:
        call.cancel()
    raise click.ClickException("the daemon did not start a parent session")


class _Board:
    """The plan's state, from its events (each change printed as it comes when `live`)."""

    def __init__(self, plan_id: str, live: bool) -> None:
        self.plan_id = plan_id
        self.steps: dict[str, str] = {}
        self.status = "running"
        self._live = live

    def update(self, event: subagent_pb2.OrchestrationEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "step_started":
            self._set(event.step_started.step_id, "running")
        elif kind == "step_completed":
            self._set(event.step_completed.step_id, "completed")
        elif kind == "step_failed":
            failed = event.step_failed
            self._set(failed.step_id, "failed")
            for blocked in failed.blocked_steps:
                self._set(blocked, "blocked")
        elif kind in ("completed", "failed"):
            self.status = kind

    def _set(self, step_id: str, status: str) -> None:
        self.steps[step_id] = status
        if self._live:
            counts = {
                s: sum(1 for x in self.steps.values() if x == s)
                for s in ("completed", "running", "failed", "blocked")
            }
            tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            click.echo(f"{time.strftime('%H:%M:%S')}  {step_id:20} {status:9}  ({tally})")
