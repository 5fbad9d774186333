"""Git repositories and worktrees as a capability of the daemon: the manager other capabilities
(subagent steps) create worktrees through, and GitRepoService and WorktreeService over it."""

from __future__ import annotations

from dataclasses import dataclass

from betcode.composition.core import Core
from betcode.daemon_config import DaemonConfig
from betcode.server.app import RpcService
from betcode.server.worktree_service import GitRepoService, WorktreeService
from betcode.v1 import git_repo_pb2, worktree_pb2
from betcode.worktrees import RepoRegistry, WorktreeManager


@dataclass(frozen=True)
class WorktreeCapability:
    manager: WorktreeManager
    repos: RepoRegistry

    @classmethod
    def open(cls, config: DaemonConfig, core: Core) -> WorktreeCapability:
        manager = WorktreeManager(
            core.writer,
            core.reader,
            config.settings.worktree,
            config.data_dir / "worktrees",
            sessions=core.sessions,
        )
        return cls(manager, RepoRegistry(core.writer, core.reader, manager))

    def services(self) -> list[RpcService]:
        return [
            RpcService(
                git_repo_pb2.DESCRIPTOR.services_by_name["GitRepoService"],
                GitRepoService(self.repos),
            ),
            RpcService(
                worktree_pb2.DESCRIPTOR.services_by_name["WorktreeService"],
                WorktreeService(self.manager),
            ),
        ]

    def apply(self, config: DaemonConfig) -> None:
        """A reload: worktrees created from now on use the new settings."""
        self.manager.settings = config.settings.worktree
