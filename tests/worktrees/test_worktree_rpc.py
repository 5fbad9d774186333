"""GitRepoService and WorktreeService on a real daemon over its Unix socket: statuses and
error codes on the wire, a refused removal listing the work, force + rescue restore, and a
session bound to a worktree whose directory was deleted never spawning claude."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from harness.daemon import Client, InProcessDaemon
from harness.git_repos import make_repository, sh

from betcode.core.errors import ErrorCode, error_code_of, error_details_of
from betcode.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    common_pb2,
    git_repo_pb2,
    git_repo_pb2_grpc,
    worktree_pb2,
    worktree_pb2_grpc,
)


class Stubs:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.repos = git_repo_pb2_grpc.GitRepoServiceStub(channel)
        self.worktrees = worktree_pb2_grpc.WorktreeServiceStub(channel)


@pytest.fixture
async def stubs(daemon: InProcessDaemon) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as channel:
        yield Stubs(channel)


async def session_in_a_worktree(
    stubs: Stubs, clients: Callable[[str], Client], tmp_path: Path, name: str
) -> tuple[worktree_pb2.WorktreeDetail, Client, str]:
    """A repository with worktree `name`, and a client in a new session there."""
    _, repo = make_repository(tmp_path)
    detail = await stubs.repos.RegisterRepo(git_repo_pb2.RegisterRepoRequest(repo_path=str(repo)))
    made = await stubs.worktrees.CreateWorktree(
        worktree_pb2.CreateWorktreeRequest(name=name, repo_id=detail.id)
    )
    client = clients(f"cli-{name}")
    client.converse(agent_pb2.StartConversation(worktree_id=made.id))
    session_id = (await client.wait_for("session_info")).session_info.session_id
    return made, client, session_id


async def failed(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_repositories_and_worktrees_over_the_wire(stubs: Stubs, tmp_path: Path) -> None:
    (tmp_path / "git").mkdir()
    _, repo = make_repository(tmp_path / "git")
    other = tmp_path / "git" / "group" / "other"
    other.mkdir(parents=True)
    sh(other, "init", "-q", "-b", "main")

    detail = await stubs.repos.RegisterRepo(git_repo_pb2.RegisterRepoRequest(repo_path=str(repo)))
    assert detail.name == "project"
    assert detail.worktree_mode == git_repo_pb2.WORKTREE_MODE_GLOBAL
    again = await failed(
        stubs.repos.RegisterRepo(git_repo_pb2.RegisterRepoRequest(repo_path=str(repo)))
    )
    assert again.code() == grpc.StatusCode.ALREADY_EXISTS
    scan = git_repo_pb2.ScanReposRequest(scan_path=str(tmp_path / "git"))
    scanned = await stubs.repos.ScanRepos(scan)
    assert sorted(r.repo_path for r in scanned.repos) == sorted([str(repo), str(other.resolve())])
    page = await stubs.repos.ListRepos(git_repo_pb2.ListReposRequest(limit=1))
    assert page.total_count == 2
    assert len(page.repos) == 1
    updated = await stubs.repos.UpdateRepo(
        git_repo_pb2.UpdateRepoRequest(id=detail.id, setup_script="touch set-up")
    )
    assert updated.setup_script == "touch set-up"
    assert updated.worktree_mode == git_repo_pb2.WORKTREE_MODE_GLOBAL  # absent: unchanged

    bad = await failed(
        stubs.worktrees.CreateWorktree(
            worktree_pb2.CreateWorktreeRequest(name="a/b", repo_id=detail.id)
        )
    )
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    missing = await failed(
        stubs.worktrees.CreateWorktree(
            worktree_pb2.CreateWorktreeRequest(
                name="x", repo_id=detail.id, branch="nope", create_branch=False
            )
        )
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    made = await stubs.worktrees.CreateWorktree(
        worktree_pb2.CreateWorktreeRequest(name="task", repo_id=detail.id)
    )
    assert made.setup_status == "succeeded"
    assert made.exists_on_disk
    assert made.branch_created
    assert made.base_branch == "main"
    path = Path(made.path)
    assert (path / "set-up").exists()

    (path / "draft.txt").write_text("unsaved\n")
    described = await stubs.worktrees.GetWorktree(
        worktree_pb2.GetWorktreeRequest(id="task", include_at_risk=True)
    )
    assert described.at_risk == ["2 untracked files (draft.txt, set-up)"]
    refused = await failed(
        stubs.worktrees.RemoveWorktree(worktree_pb2.RemoveWorktreeRequest(id=made.id))
    )
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_code_of(refused) == ErrorCode.WORK_AT_RISK
    assert "draft.txt" in error_details_of(refused)["at_risk"]
    assert (path / "draft.txt").exists()

    forced = await stubs.worktrees.RemoveWorktree(
        worktree_pb2.RemoveWorktreeRequest(id=made.id, force=True)
    )
    assert forced.removed
    assert forced.rescue_ref == f"refs/betcode/rescue/{forced.rescue_id}"
    assert not (path / "README.md").exists()
    rescues = await stubs.worktrees.ListRescues(worktree_pb2.ListRescuesRequest())
    assert [r.id for r in rescues.rescues] == [forced.rescue_id]
    restored = await stubs.worktrees.RestoreRescue(
        worktree_pb2.RestoreRescueRequest(id=forced.rescue_id)
    )
    assert (Path(restored.path) / "draft.txt").read_text() == "unsaved\n"

    gone = await failed(stubs.worktrees.GetWorktree(worktree_pb2.GetWorktreeRequest(id=made.id)))
    assert gone.code() == grpc.StatusCode.NOT_FOUND
    busy = await failed(
        stubs.repos.UnregisterRepo(git_repo_pb2.UnregisterRepoRequest(id=detail.id))
    )
    assert busy.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_session_whose_worktree_vanished_never_spawns_claude(
    stubs: Stubs, clients: Callable[[str], Client], tmp_path: Path
) -> None:
    _, repo = make_repository(tmp_path)
    detail = await stubs.repos.RegisterRepo(git_repo_pb2.RegisterRepoRequest(repo_path=str(repo)))
    made = await stubs.worktrees.CreateWorktree(
        worktree_pb2.CreateWorktreeRequest(name="gone", repo_id=detail.id)
    )
    client = clients("cli-1")
    client.converse(agent_pb2.StartConversation(worktree_id=made.id))
    info = (await client.wait_for("session_info")).session_info
    assert info.working_directory == made.path
    assert info.worktree_id == made.id

    shutil.rmtree(made.path)
    client.say("SCN:text hello")
    error = (await client.wait_for("error")).error
    assert error.code == ErrorCode.WORKTREE_MISSING
    assert "worktree directory does not exist" in error.message
    assert client.of_kind("status_change") == []  # no turn started, no claude spawned

    listed = await stubs.worktrees.ListWorktrees(worktree_pb2.ListWorktreesRequest())
    assert [(w.stale, w.session_count) for w in listed.worktrees] == [(True, 1)]

    late = clients("cli-2")
    late.converse(agent_pb2.StartConversation(worktree_id=made.id))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await late.wait_for("session_info", within_s=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_running_turn_holds_off_removal_until_it_ends(
    stubs: Stubs, clients: Callable[[str], Client], tmp_path: Path
) -> None:
    made, client, session_id = await session_in_a_worktree(stubs, clients, tmp_path, "busy")
    client.say('SCN:slow {"words": 400, "delay": 0.05} take your time')
    started = await client.wait_for_status(common_pb2.AGENT_STATUS_THINKING)

    refused = await failed(
        stubs.worktrees.RemoveWorktree(worktree_pb2.RemoveWorktreeRequest(id=made.id))
    )
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"a running turn in session {session_id}" in error_details_of(refused)["at_risk"]

    client.send(agent_pb2.AgentRequest(cancel=agent_pb2.CancelRequest()))
    await client.wait_for_status(common_pb2.AGENT_STATUS_IDLE, after=started.sequence)
    removed = await stubs.worktrees.RemoveWorktree(worktree_pb2.RemoveWorktreeRequest(id=made.id))
    assert removed.sessions_closed == 1
    assert not (Path(made.path) / "README.md").exists()


async def test_rescue_restore_moves_the_sessions_of_the_removed_worktree(
    daemon: InProcessDaemon, stubs: Stubs, clients: Callable[[str], Client], tmp_path: Path
) -> None:
    made, client, session_id = await session_in_a_worktree(stubs, clients, tmp_path, "task")
    await client.close()
    (Path(made.path) / "draft.txt").write_text("unsaved\n")
    forced = await stubs.worktrees.RemoveWorktree(
        worktree_pb2.RemoveWorktreeRequest(id=made.id, force=True)
    )

    async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as channel:
        sessions = agent_pb2_grpc.AgentServiceStub(channel)

        async def the_session() -> agent_pb2.SessionSummary:
            listed = await sessions.ListSessions(agent_pb2.ListSessionsRequest())
            summary: agent_pb2.SessionSummary
            [summary] = [s for s in listed.sessions if s.id == session_id]
            return summary

        before = await the_session()
        assert before.working_directory == made.path
        assert before.directory_missing
        restored = await stubs.worktrees.RestoreRescue(
            worktree_pb2.RestoreRescueRequest(id=forced.rescue_id)
        )
        after = await the_session()
    assert after.working_directory == restored.path
    assert after.worktree_id == restored.id
    assert not after.directory_missing
