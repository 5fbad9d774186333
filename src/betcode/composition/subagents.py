"""Subagents and orchestration plans as a capability of the daemon. A subagent is a session
like any other; its permission questions reach the parent session through the bridge's
delegates (the inbox), and a plan's step may run in a worktree."""

from __future__ import annotations

from dataclasses import dataclass

from betcode.composition.core import Core
from betcode.daemon_config import DaemonConfig
from betcode.server.app import RpcService
from betcode.server.subagent_service import SubagentService
from betcode.storage.reader import StoreReader
from betcode.subagents.control import SubagentControl
from betcode.subagents.inbox import SubagentInbox
from betcode.subagents.manager import SubagentManager
from betcode.subagents.orchestrations import Orchestrations
from betcode.v1 import subagent_pb2
from betcode.worktrees import WorktreeManager


@dataclass(frozen=True)
class SubagentCapability:
    manager: SubagentManager
    control: SubagentControl
    orchestrations: Orchestrations
    reader: StoreReader

    @classmethod
    def open(
        cls, config: DaemonConfig, core: Core, worktrees: WorktreeManager
    ) -> SubagentCapability:
        manager = SubagentManager(
            core.sessions,
            core.writer,
            core.reader,
            config.settings.subagent,
            core.audit,
            core.bridge,
        )
        manager.admission.worktrees = worktrees
        core.bridge.delegates = SubagentInbox(
            manager.by_session, core.sessions, core.reader, core.audit, str(core.bridge.rules.home)
        )
        return cls(
            manager,
            SubagentControl(manager, core.reader, core.audit),
            Orchestrations(manager, core.writer, core.reader),
            core.reader,
        )

    def services(self) -> list[RpcService]:
        service = SubagentService(self.manager, self.control, self.orchestrations, self.reader)
        return [RpcService(subagent_pb2.DESCRIPTOR.services_by_name["SubagentService"], service)]

    def apply(self, config: DaemonConfig) -> None:
        """A reload: subagents spawned from now on use the new settings; a larger pool starts
        queued ones."""
        self.manager.apply_settings(config.settings.subagent)
