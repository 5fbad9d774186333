"""GitRepoService and WorktreeService: thin adapters from betcode.v1 onto betcode.worktrees."""

from __future__ import annotations

import grpc

from betcode.core.convert import timestamp
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import check_id, check_name, check_text, domain_error, invalid
from betcode.server.errors import translates_errors
from betcode.storage.worktrees import RepoRecord, RescueRecord, WorktreeMode
from betcode.v1 import git_repo_pb2, worktree_pb2
from betcode.worktrees import (
    Refusal,
    RepoChanges,
    RepoRegistry,
    WorktreeError,
    WorktreeManager,
    WorktreeView,
    merge,
)

_CODES = {
    Refusal.INVALID: ErrorCode.INVALID_REQUEST,
    Refusal.OUTSIDE: ErrorCode.PATH_NOT_ALLOWED,
    Refusal.EXISTS: ErrorCode.ALREADY_EXISTS,
    Refusal.NOT_FOUND: ErrorCode.NOT_FOUND,
    Refusal.NO_SPACE: ErrorCode.DISK_FULL,
    Refusal.AT_RISK: ErrorCode.WORK_AT_RISK,
    Refusal.PRECONDITION: ErrorCode.PRECONDITION_FAILED,
    Refusal.GIT_FAILED: ErrorCode.GIT_FAILED,
}
_MODES: dict[int, WorktreeMode] = {
    git_repo_pb2.WORKTREE_MODE_UNSPECIFIED: "global",
    git_repo_pb2.WORKTREE_MODE_GLOBAL: "global",
    git_repo_pb2.WORKTREE_MODE_LOCAL: "local",
    git_repo_pb2.WORKTREE_MODE_CUSTOM: "custom",
}
_WIRE_MODES = {
    "global": git_repo_pb2.WORKTREE_MODE_GLOBAL,
    "local": git_repo_pb2.WORKTREE_MODE_LOCAL,
    "custom": git_repo_pb2.WORKTREE_MODE_CUSTOM,
}


def worktree_error(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, WorktreeError):
        code = _CODES[exc.refusal]
        if code is ErrorCode.NOT_FOUND and "worktree_id" in exc.details:
            code = ErrorCode.WORKTREE_NOT_FOUND
        return BetCodeError(code, exc.message, exc.details)
    return domain_error(exc)


serves = translates_errors(worktree_error)


def repo_detail(repo: RepoRecord) -> git_repo_pb2.GitRepoDetail:
    return git_repo_pb2.GitRepoDetail(
        id=repo.id,
        name=repo.name,
        repo_path=repo.repo_path,
        worktree_mode=_WIRE_MODES[repo.worktree_mode],
        local_subfolder=repo.local_subfolder,
        custom_path=repo.custom_path or "",
        setup_script=repo.setup_script or "",
        auto_gitignore=repo.auto_gitignore,
        worktree_count=repo.worktree_count,
        created_at=timestamp(repo.created_at),
        last_active=timestamp(repo.last_active),
    )


def worktree_detail(
    view: WorktreeView, at_risk: list[str] | None = None
) -> worktree_pb2.WorktreeDetail:
    record = view.record
    return worktree_pb2.WorktreeDetail(
        id=record.id,
        name=record.name,
        path=record.path,
        branch=record.branch,
        repo_id=record.repo_id or "",
        setup_script=record.setup_script or "",
        exists_on_disk=view.exists_on_disk,
        session_count=record.session_count,
        created_at=timestamp(record.created_at),
        last_active=timestamp(record.last_active),
        setup_status=record.setup_status,
        setup_error=record.setup_error or "",
        stale=not view.exists_on_disk,
        at_risk=at_risk or [],
        branch_created=record.branch_created,
        base_branch=record.base_branch or "",
    )


def rescue_info(rescue: RescueRecord) -> worktree_pb2.RescueInfo:
    return worktree_pb2.RescueInfo(
        id=rescue.id,
        repo_path=rescue.repo_path,
        worktree_name=rescue.worktree_name,
        worktree_path=rescue.worktree_path,
        branch=rescue.branch,
        ref=rescue.ref,
        head_commit=rescue.head_commit,
        work_commit=rescue.work_commit or "",
        saved=rescue.at_risk,
        created_at=timestamp(rescue.created_at),
    )


def _mode(value: int) -> WorktreeMode:
    if value not in _MODES:
        raise invalid(f"worktree_mode {value} is not a WorktreeMode")
    return _MODES[value]


class GitRepoService:
    def __init__(self, repos: RepoRegistry) -> None:
        self._repos = repos

    @serves
    async def RegisterRepo(
        self, request: git_repo_pb2.RegisterRepoRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.GitRepoDetail:
        changes = RepoChanges(
            name=check_name(request.name, "name") or None,
            worktree_mode=_mode(request.worktree_mode),
            local_subfolder=request.local_subfolder or None,
            custom_path=request.custom_path or None,
            setup_script=check_text(request.setup_script, "setup_script") or None,
            auto_gitignore=request.auto_gitignore,
        )
        return repo_detail(await self._repos.register(request.repo_path, changes))

    @serves
    async def UnregisterRepo(
        self, request: git_repo_pb2.UnregisterRepoRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.UnregisterRepoResponse:
        removed = await self._repos.unregister(
            check_id(request.id, "id"), remove_worktrees=request.remove_worktrees
        )
        return git_repo_pb2.UnregisterRepoResponse(removed=True, worktrees_removed=removed)

    @serves
    async def ListRepos(
        self, request: git_repo_pb2.ListReposRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.ListReposResponse:
        repos, total = await self._repos.list_repos(request.limit, request.offset)
        return git_repo_pb2.ListReposResponse(
            repos=[repo_detail(r) for r in repos], total_count=total
        )

    @serves
    async def GetRepo(
        self, request: git_repo_pb2.GetRepoRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.GitRepoDetail:
        return repo_detail(await self._repos.find(check_id(request.id, "id")))

    @serves
    async def UpdateRepo(
        self, request: git_repo_pb2.UpdateRepoRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.GitRepoDetail:
        given = request.HasField
        changes = RepoChanges(
            name=check_name(request.name, "name") if given("name") else None,
            worktree_mode=_mode(request.worktree_mode) if given("worktree_mode") else None,
            local_subfolder=request.local_subfolder if given("local_subfolder") else None,
            custom_path=request.custom_path if given("custom_path") else None,
            setup_script=(
                check_text(request.setup_script, "setup_script") if given("setup_script") else None
            ),
            auto_gitignore=request.auto_gitignore if given("auto_gitignore") else None,
        )
        return repo_detail(await self._repos.update(check_id(request.id, "id"), changes))

    @serves
    async def ScanRepos(
        self, request: git_repo_pb2.ScanReposRequest, context: grpc.aio.ServicerContext
    ) -> git_repo_pb2.ListReposResponse:
        found = await self._repos.scan(request.scan_path, request.max_depth)
        return git_repo_pb2.ListReposResponse(
            repos=[repo_detail(r) for r in found], total_count=len(found)
        )


class WorktreeService:
    def __init__(self, worktrees: WorktreeManager) -> None:
        self._worktrees = worktrees

    @serves
    async def CreateWorktree(
        self, request: worktree_pb2.CreateWorktreeRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.WorktreeDetail:
        view = await self._worktrees.create(
            name=request.name,
            repo_id=check_id(request.repo_id, "repo_id"),
            branch=request.branch,
            create_branch=request.create_branch if request.HasField("create_branch") else None,
            setup_script=check_text(request.setup_script, "setup_script"),
        )
        return worktree_detail(view)

    @serves
    async def RemoveWorktree(
        self, request: worktree_pb2.RemoveWorktreeRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.RemoveWorktreeResponse:
        view = await self._worktrees.find(check_id(request.id, "id"))
        removal = await self._worktrees.remove(view.record.id, force=request.force)
        return worktree_pb2.RemoveWorktreeResponse(
            removed=True,
            sessions_closed=removal.sessions_closed,
            rescue_id=removal.rescue.id if removal.rescue else "",
            rescue_ref=removal.rescue.ref if removal.rescue else "",
            saved=removal.at_risk if removal.rescue else [],
        )

    @serves
    async def ListWorktrees(
        self, request: worktree_pb2.ListWorktreesRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.ListWorktreesResponse:
        repo_id = check_id(request.repo_id, "repo_id", required=False)
        views = await self._worktrees.list_worktrees(repo_id)
        return worktree_pb2.ListWorktreesResponse(worktrees=[worktree_detail(v) for v in views])

    @serves
    async def GetWorktree(
        self, request: worktree_pb2.GetWorktreeRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.WorktreeDetail:
        view = await self._worktrees.find(check_id(request.id, "id"))
        at_risk = await self._worktrees.at_risk(view.record.id) if request.include_at_risk else []
        return worktree_detail(view, at_risk)

    @serves
    async def ListRescues(
        self, request: worktree_pb2.ListRescuesRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.ListRescuesResponse:
        rescues = await self._worktrees.rescues()
        return worktree_pb2.ListRescuesResponse(rescues=[rescue_info(r) for r in rescues])

    @serves
    async def RestoreRescue(
        self, request: worktree_pb2.RestoreRescueRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.WorktreeDetail:
        return worktree_detail(await self._worktrees.restore(check_id(request.id, "id")))

    @serves
    async def DiffWorktree(
        self, request: worktree_pb2.DiffWorktreeRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.DiffWorktreeResponse:
        view = await self._worktrees.find(check_id(request.id, "id"))
        found = await merge.diff(self._worktrees, view.record.id, stat=request.stat)
        return worktree_pb2.DiffWorktreeResponse(
            base_branch=found.base_branch,
            merge_base=found.merge_base,
            diff=found.diff,
            untracked=found.untracked,
        )

    @serves
    async def MergeWorktree(
        self, request: worktree_pb2.MergeWorktreeRequest, context: grpc.aio.ServicerContext
    ) -> worktree_pb2.MergeWorktreeResponse:
        view = await self._worktrees.find(check_id(request.id, "id"))
        merged = await merge.merge(
            self._worktrees,
            view.record.id,
            squash=request.squash,
            message=check_text(request.message, "message"),
        )
        response = worktree_pb2.MergeWorktreeResponse(
            base_branch=merged.base_branch, commit=merged.commit, commits_merged=merged.commits
        )
        if request.remove:
            try:
                removal = await self._worktrees.remove(view.record.id)
            except WorktreeError as error:  # merged all the same: say why it stays
                response.kept_reason = error.message
            else:
                response.removed = True
                response.sessions_closed = removal.sessions_closed
        return response
