"""`betcode repo register | unregister | list | get | update | scan`: the git repositories
worktrees are made from. A repository is named by its id, name or path."""

from __future__ import annotations

import json
import os
from typing import Any

import click
from google.protobuf import json_format
from google.protobuf.message import Message

from betcode.cli.connection import DaemonClient
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.sessions_cmd import table
from betcode.v1 import git_repo_pb2, git_repo_pb2_grpc

json_option = click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
MODES = {
    "global": git_repo_pb2.WORKTREE_MODE_GLOBAL,
    "local": git_repo_pb2.WORKTREE_MODE_LOCAL,
    "custom": git_repo_pb2.WORKTREE_MODE_CUSTOM,
}
MODE_NAMES = {value: name for name, value in MODES.items()}


def repos(client: DaemonClient) -> git_repo_pb2_grpc.GitRepoServiceStub:
    return client.service_stub(git_repo_pb2_grpc.GitRepoServiceStub)


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2))


@click.group("repo")
def repo_group() -> None:
    """Register the git repositories worktrees are made from."""


mode_option = click.option(
    "--mode",
    type=click.Choice(sorted(MODES)),
    help="Where its worktrees go: global (a shared folder, default), local (inside the "
    "repository), custom (--custom-path).",
)


@repo_group.command("register")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--name", default="", help="Its name (default: the folder's name).")
@mode_option
@click.option("--subfolder", default="", help="LOCAL mode's folder (default .worktree).")
@click.option("--custom-path", default="", help="CUSTOM mode's folder.")
@click.option("--setup", "setup_script", default="", help="A shell line run in new worktrees.")
@click.option("--no-gitignore", is_flag=True, help="LOCAL mode: leave .gitignore alone.")
@json_option
@socket_option
def register(
    path: str,
    name: str,
    mode: str | None,
    subfolder: str,
    custom_path: str,
    setup_script: str,
    no_gitignore: bool,
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Register the repository at PATH."""
    request = git_repo_pb2.RegisterRepoRequest(
        repo_path=os.path.realpath(path),
        name=name,
        worktree_mode=MODES[mode or "global"],
        local_subfolder=subfolder,
        custom_path=os.path.abspath(custom_path) if custom_path else "",
        setup_script=setup_script,
        auto_gitignore=not no_gitignore,
    )
    detail = call_daemon(socket_path, lambda c: c.call(repos(c).RegisterRepo, request))
    show_repo(detail, as_json)


@repo_group.command("unregister")
@click.argument("repo")
@click.option("--remove-worktrees", is_flag=True, help="Remove its worktrees too (safely).")
@socket_option
def unregister(repo: str, remove_worktrees: bool, socket_path: str | None) -> None:
    """Forget REPO (its worktrees must be gone, or go with --remove-worktrees)."""

    async def run(client: DaemonClient) -> git_repo_pb2.UnregisterRepoResponse:
        found = await find_repo(client, repo)
        request = git_repo_pb2.UnregisterRepoRequest(id=found.id, remove_worktrees=remove_worktrees)
        return await client.call(repos(client).UnregisterRepo, request)

    response = call_daemon(socket_path, run)
    click.echo(f"Unregistered {repo} ({response.worktrees_removed} worktree(s) removed).")


@repo_group.command("list")
@click.option("--limit", type=click.IntRange(min=0), default=0)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@json_option
@socket_option
def list_repos(limit: int, offset: int, as_json: bool, socket_path: str | None) -> None:
    """Registered repositories."""
    request = git_repo_pb2.ListReposRequest(limit=limit, offset=offset)
    response = call_daemon(socket_path, lambda c: c.call(repos(c).ListRepos, request))
    if as_json:
        emit_json(
            {"repos": [as_dict(r) for r in response.repos], "total_count": response.total_count}
        )
        return
    if not response.repos:
        click.echo("No repositories registered.")
        return
    rows = [
        (
            r.id[:8],
            r.name,
            MODE_NAMES.get(r.worktree_mode, "global"),
            str(r.worktree_count),
            r.repo_path,
        )
        for r in response.repos
    ]
    for line in table(("ID", "NAME", "MODE", "WORKTREES", "PATH"), rows):
        click.echo(line)
    if response.total_count > len(response.repos) + offset:
        click.echo(f"({response.total_count - len(response.repos) - offset} more)")


@repo_group.command("get")
@click.argument("repo")
@json_option
@socket_option
def get_repo(repo: str, as_json: bool, socket_path: str | None) -> None:
    """One repository."""
    show_repo(call_daemon(socket_path, lambda c: find_repo(c, repo)), as_json)


@repo_group.command("update")
@click.argument("repo")
@click.option("--name")
@mode_option
@click.option("--subfolder")
@click.option("--custom-path")
@click.option("--setup", "setup_script")
@click.option("--gitignore/--no-gitignore", "auto_gitignore", default=None)
@json_option
@socket_option
def update(
    repo: str,
    name: str | None,
    mode: str | None,
    subfolder: str | None,
    custom_path: str | None,
    setup_script: str | None,
    auto_gitignore: bool | None,
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Change some of REPO's settings (those not given stay)."""
    custom_path = os.path.abspath(custom_path) if custom_path is not None else None

    async def run(client: DaemonClient) -> git_repo_pb2.GitRepoDetail:
        found = await find_repo(client, repo)
        request = git_repo_pb2.UpdateRepoRequest(id=found.id)
        if name is not None:
            request.name = name
        if mode is not None:
            request.worktree_mode = MODES[mode]
        if subfolder is not None:
            request.local_subfolder = subfolder
        if custom_path is not None:
            request.custom_path = custom_path
        if setup_script is not None:
            request.setup_script = setup_script
        if auto_gitignore is not None:
            request.auto_gitignore = auto_gitignore
        return await client.call(repos(client).UpdateRepo, request)

    show_repo(call_daemon(socket_path, run), as_json)


@repo_group.command("scan")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--max-depth", type=click.IntRange(min=1, max=10), default=2)
@json_option
@socket_option
def scan(directory: str, max_depth: int, as_json: bool, socket_path: str | None) -> None:
    """Register every repository found under DIRECTORY."""
    request = git_repo_pb2.ScanReposRequest(
        scan_path=os.path.realpath(directory), max_depth=max_depth
    )
    response = call_daemon(socket_path, lambda c: c.call(repos(c).ScanRepos, request))
    if as_json:
        emit_json([as_dict(r) for r in response.repos])
        return
    for repo in response.repos:
        click.echo(f"{repo.id[:8]}  {repo.name}  {repo.repo_path}")
    click.echo(f"{len(response.repos)} repositories.")


async def find_repo(client: DaemonClient, repo: str) -> git_repo_pb2.GitRepoDetail:
    request = git_repo_pb2.GetRepoRequest(id=_path_or_name(repo))
    return await client.call(repos(client).GetRepo, request)


def _path_or_name(reference: str) -> str:
    return os.path.realpath(reference) if os.sep in reference or reference == "." else reference


def show_repo(detail: git_repo_pb2.GitRepoDetail, as_json: bool) -> None:
    if as_json:
        emit_json(as_dict(detail))
        return
    mode = MODE_NAMES.get(detail.worktree_mode, "global")
    lines = [
        ("id", detail.id),
        ("name", detail.name),
        ("path", detail.repo_path),
        ("mode", mode + (f" ({detail.local_subfolder})" if mode == "local" else "")),
        ("custom path", detail.custom_path or "-"),
        ("setup", detail.setup_script or "-"),
        ("worktrees", str(detail.worktree_count)),
    ]
    for key, value in lines:
        click.echo(f"{key:<12} {value}")
