"""`betcode worktree create | list | get | diff | merge | remove | rescue`: git worktrees of
registered repositories (`betcode repo`). A worktree is named by its id, a unique start of it
or its name (`ids`). A refused removal exits 1 (a failed precondition, docs/CLI.md#exit-codes)
and lists what it would lose; `--force` saves that under a rescue ref first (`betcode worktree
rescue list | restore ID`). The refusal's message names every uncommitted change, untracked
file and unmerged commit. A refused merge (conflict, uncommitted changes) exits 1 too and
changes nothing; a name already taken exits 5.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import click

from betcode.cli.connection import DaemonClient
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.ids import RESCUES, WORKTREES, worktree_id_of
from betcode.cli.repo_cmd import as_dict, emit_json, find_repo, json_option
from betcode.cli.sessions_cmd import table
from betcode.cli.worktree_target import repo_around, worktrees
from betcode.v1 import worktree_pb2


@click.group("worktree")
def worktree_group() -> None:
    """Create, list and safely remove git worktrees (one per parallel task)."""


@worktree_group.command("create")
@click.argument("name")
@click.option(
    "--repo",
    default="",
    help="Repository id, name or path (default: the one here, registered if it is not yet).",
)
@click.option(
    "--branch", default="", help="An existing branch to check out (default: a new branch NAME)."
)
@click.option("--new-branch", is_flag=True, help="Create --branch (it must not exist yet).")
@click.option("--setup", "setup_script", default="", help="A shell line to run in it.")
@json_option
@socket_option
def create(
    name: str,
    repo: str,
    branch: str,
    new_branch: bool,
    setup_script: str,
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Create worktree NAME on a new branch NAME, or on --branch (created with --new-branch)."""

    async def run(client: DaemonClient) -> worktree_pb2.WorktreeDetail:
        found = await (find_repo(client, repo) if repo else repo_around(client, os.getcwd()))
        request = worktree_pb2.CreateWorktreeRequest(
            name=name, repo_id=found.id, branch=branch, setup_script=setup_script
        )
        if branch:
            request.create_branch = new_branch  # an existing branch unless --new-branch
        return await client.call(worktrees(client).CreateWorktree, request)

    detail = call_daemon(socket_path, run)
    show_worktree(detail, as_json)
    if detail.setup_status in ("failed", "timeout"):
        click.echo(f"warning: setup {detail.setup_status}: {detail.setup_error}", err=True)


@worktree_group.command("list")
@click.option("--repo", default="", help="Only this repository's (id, name or path).")
@json_option
@socket_option
def list_worktrees(repo: str, as_json: bool, socket_path: str | None) -> None:
    """Worktrees, with whether each is still on disk and how many sessions it has."""

    async def run(client: DaemonClient) -> worktree_pb2.ListWorktreesResponse:
        repo_id = (await find_repo(client, repo)).id if repo else ""
        request = worktree_pb2.ListWorktreesRequest(repo_id=repo_id)
        return await client.call(worktrees(client).ListWorktrees, request)

    response = call_daemon(socket_path, run)
    if as_json:
        emit_json([as_dict(w) for w in response.worktrees])
        return
    if not response.worktrees:
        click.echo("No worktrees.")
        return
    rows = [
        (
            w.id[:8],
            w.name,
            w.branch,
            "stale" if w.stale else "ok",
            str(w.session_count),
            w.setup_status,
            w.path,
        )
        for w in response.worktrees
    ]
    for line in table(("ID", "NAME", "BRANCH", "STATE", "SESSIONS", "SETUP", "PATH"), rows):
        click.echo(line)


@worktree_group.command("get")
@click.argument("worktree", shell_complete=WORKTREES.complete)
@json_option
@socket_option
def get_worktree(worktree: str, as_json: bool, socket_path: str | None) -> None:
    """One worktree, and what removing it now would lose."""

    async def act(client: DaemonClient) -> worktree_pb2.WorktreeDetail:
        request = worktree_pb2.GetWorktreeRequest(
            id=await worktree_id_of(client, worktree), include_at_risk=True
        )
        return await client.call(worktrees(client).GetWorktree, request)

    detail = call_daemon(socket_path, act)
    show_worktree(detail, as_json)


@worktree_group.command("remove")
@click.argument("worktree", shell_complete=WORKTREES.complete)
@click.option("--force", is_flag=True, help="Remove even if work would be lost, saving it first.")
@json_option
@socket_option
def remove(worktree: str, force: bool, as_json: bool, socket_path: str | None) -> None:
    """Remove WORKTREE; refused while it holds work that is nowhere else."""

    async def act(client: DaemonClient) -> worktree_pb2.RemoveWorktreeResponse:
        request = worktree_pb2.RemoveWorktreeRequest(
            id=await worktree_id_of(client, worktree), force=force
        )
        return await client.call(worktrees(client).RemoveWorktree, request)

    response = call_daemon(socket_path, act)
    if as_json:
        emit_json(as_dict(response))
        return
    click.echo(f"Removed {worktree} ({response.sessions_closed} live session(s) stopped).")
    if response.rescue_id:
        click.echo(f"Saved under {response.rescue_ref}:")
        for item in response.saved:
            click.echo(f"  - {item}")
        click.echo(f"Restore with: betcode worktree rescue restore {response.rescue_id}")


@worktree_group.command("diff")
@click.argument("worktree", shell_complete=WORKTREES.complete)
@click.option("--stat", is_flag=True, help="Files and lines changed instead of the whole diff.")
@json_option
@socket_option
def diff(worktree: str, stat: bool, as_json: bool, socket_path: str | None) -> None:
    """What WORKTREE changed against its base branch (its files as they are now)."""

    async def act(client: DaemonClient) -> worktree_pb2.DiffWorktreeResponse:
        request = worktree_pb2.DiffWorktreeRequest(
            id=await worktree_id_of(client, worktree), stat=stat
        )
        return await client.call(worktrees(client).DiffWorktree, request)

    response = call_daemon(socket_path, act)
    if as_json:
        emit_json(as_dict(response))
        return
    click.echo(response.diff, nl=False)
    if response.untracked:
        click.echo(f"untracked (not in the diff, nor in a merge): {', '.join(response.untracked)}")
    if not response.diff and not response.untracked:
        click.echo(f"No changes against {response.base_branch}.")


@worktree_group.command("merge")
@click.argument("worktree", shell_complete=WORKTREES.complete)
@click.option("--squash", is_flag=True, help="One commit instead of a merge commit.")
@click.option("--remove", is_flag=True, help="Then remove the worktree, if that loses nothing.")
@click.option("--message", "-m", default="", help="The commit message.")
@json_option
@socket_option
def merge(
    worktree: str,
    squash: bool,
    remove: bool,
    message: str,
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Merge WORKTREE's branch into its base branch. Refused, changing nothing, on a conflict
    or uncommitted changes (in the worktree, or in the base branch's checkout)."""

    async def act(client: DaemonClient) -> worktree_pb2.MergeWorktreeResponse:
        request = worktree_pb2.MergeWorktreeRequest(
            id=await worktree_id_of(client, worktree),
            squash=squash,
            remove=remove,
            message=message,
        )
        return await client.call(worktrees(client).MergeWorktree, request)

    response = call_daemon(socket_path, act)
    if as_json:
        emit_json(as_dict(response))
        return
    how = "squashed into one commit on" if squash else "merged into"
    click.echo(
        f"{response.commits_merged} commit(s) of {worktree} {how} {response.base_branch} "
        f"(now {response.commit[:12]})"
    )
    if response.removed:
        click.echo(f"Removed {worktree} ({response.sessions_closed} live session(s) stopped).")
    elif remove:
        click.echo(f"{worktree} was kept: {response.kept_reason}", err=True)


@worktree_group.group("rescue")
def rescue_group() -> None:
    """Work that forced removals saved."""


@rescue_group.command("list")
@json_option
@socket_option
def rescue_list(as_json: bool, socket_path: str | None) -> None:
    """Rescues, oldest first."""
    request = worktree_pb2.ListRescuesRequest()
    response = call_daemon(socket_path, lambda c: c.call(worktrees(c).ListRescues, request))
    if as_json:
        emit_json([as_dict(r) for r in response.rescues])
        return
    if not response.rescues:
        click.echo("No rescues.")
        return
    for rescue in response.rescues:
        click.echo(f"{rescue.id}  {rescue.worktree_name} ({rescue.branch})  {rescue.repo_path}")
        for item in rescue.saved:
            click.echo(f"    {item}")


@rescue_group.command("restore")
@click.argument("rescue_id", shell_complete=RESCUES.complete)
@json_option
@socket_option
def rescue_restore(rescue_id: str, as_json: bool, socket_path: str | None) -> None:
    """Restore RESCUE_ID into a new worktree: its commits, then its files as uncommitted."""

    async def act(client: DaemonClient) -> tuple[worktree_pb2.WorktreeDetail, list[str]]:
        rescue = await RESCUES.find(client, rescue_id)
        request = worktree_pb2.RestoreRescueRequest(id=rescue.id)
        detail = await client.call(worktrees(client).RestoreRescue, request)
        moved = await client.list_sessions(worktree_id=detail.id)
        return detail, [session.id for session in moved.sessions]

    detail, moved = call_daemon(socket_path, act)
    show_worktree(detail, as_json)
    if moved and not as_json:
        click.echo(f"sessions moved here from the removed worktree: {', '.join(moved)}")


def show_worktree(detail: worktree_pb2.WorktreeDetail, as_json: bool) -> None:
    if as_json:
        emit_json(as_dict(detail))
        return
    setup = detail.setup_status + (f": {detail.setup_error}" if detail.setup_error else "")
    lines: Sequence[tuple[str, str]] = [
        ("id", detail.id),
        ("name", detail.name),
        ("path", detail.path + (" (missing: stale)" if detail.stale else "")),
        ("branch", detail.branch + (" (created for it)" if detail.branch_created else "")),
        ("sessions", str(detail.session_count)),
        ("setup", setup),
    ]
    for key, value in lines:
        click.echo(f"{key:<9} {value}")
    if detail.at_risk:
        click.echo("removing it now would lose:")
        for item in detail.at_risk:
            click.echo(f"  - {item}")
