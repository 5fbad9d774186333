"""What the gRPC server is made of besides the capabilities' own services: the health monitor
and its components, VersionService, and the services on the core (agent, config, monitor,
commands)."""

from __future__ import annotations

import os
from collections.abc import Callable

from betcode import __version__
from betcode.commands.catalog import CommandCatalog, stored_init_lookup, user_claude_dir
from betcode.composition.core import Core
from betcode.composition.health_checks import add_resource_components
from betcode.composition.telemetry import Telemetry
from betcode.core.session_directories import session_directories
from betcode.daemon_config import DaemonConfig
from betcode.limits.memory import MIB
from betcode.server.agent_service import RAW_RESPONSE_METHODS, AgentService
from betcode.server.app import RpcService
from betcode.server.claude_status import ClaudeCodeReport
from betcode.server.command_service import CommandService
from betcode.server.config_service import ConfigService, ServerFacts
from betcode.server.health import ComponentCheck, ComponentReport, HealthMonitor, permission_check
from betcode.server.history_service import HistoryService
from betcode.server.monitor_service import MonitorService
from betcode.server.version_service import ServerCapabilities, VersionService
from betcode.v1 import agent_pb2, commands_pb2, config_pb2, history_pb2, monitor_pb2

FEATURE_FLAGS = {
    "streaming_deltas": True,
    "permission_bridge": True,
    "session_persistence": True,
    "batched_replay": True,
    "worktree_management": True,
    "subagent_orchestration": True,
}


def health_monitor(
    config: DaemonConfig, core: Core, claude: ClaudeCodeReport, config_check: ComponentCheck
) -> HealthMonitor:
    """The monitor with the core's components; the server and the web client add their own."""
    health = HealthMonitor(
        server_version=__version__,
        claude_code=lambda: claude,
        facts={
            "pid": str(os.getpid()),
            "socket": str(config.socket_path),
            "data_dir": str(config.data_dir),
        },
    )
    add_resource_components(health, core.writer, core.sessions)
    health.add_component("sessions", lambda: _sessions_report(core), critical=False)
    health.add_component("permissions", permission_check(core.bridge), critical=False)
    health.add_component("config", config_check, critical=False)
    return health


def version_service(claude: ClaudeCodeReport) -> VersionService:
    capabilities = ServerCapabilities(
        server_version=__version__,
        feature_flags=FEATURE_FLAGS,
        max_message_bytes=16 * 1024 * 1024,
        worktrees_enabled=True,
        subagents_enabled=True,
    )
    return VersionService(capabilities, lambda: claude)


def core_services(
    config: DaemonConfig,
    current: Callable[[], DaemonConfig],
    core: Core,
    telemetry: Telemetry,
    *,
    tcp_port: Callable[[], int | None],
    on_change: Callable[[], None],
) -> list[RpcService]:
    """AgentService, ConfigService, MonitorService, CommandService and HistoryService.
    `current` is the configuration as the last reload left it; `on_change` reloads it."""
    agent = AgentService(
        core.sessions,
        core.bridge,
        core.writer,
        core.reader,
        core.admission,
        client_silence=lambda: current().settings.client_silence_seconds,
    )
    config_service = ConfigService(
        config_dir=config.config_dir,
        environ=config.environ,
        rules=core.bridge.rules,
        sessions=core.sessions,
        facts=ServerFacts(config.socket_path, config.database_path, tcp_port),
        on_change=on_change,
        settings_overrides=config.settings_overrides,
    )
    commands = CommandService(
        session_directories(core.sessions),
        CommandCatalog(user_claude_dir(config.environ), stored_init_lookup(core.reader)),
    )
    monitor = MonitorService(core.sessions, core.bridge, telemetry.recent.spend, core.admission)
    return [
        RpcService(
            agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
            agent,
            raw_responses=RAW_RESPONSE_METHODS,
        ),
        RpcService(config_pb2.DESCRIPTOR.services_by_name["ConfigService"], config_service),
        RpcService(monitor_pb2.DESCRIPTOR.services_by_name["MonitorService"], monitor),
        RpcService(commands_pb2.DESCRIPTOR.services_by_name["CommandService"], commands),
        RpcService(
            history_pb2.DESCRIPTOR.services_by_name["HistoryService"],
            HistoryService(core.reader, core.sessions, user_claude_dir(config.environ)),
        ),
    ]


def _sessions_report(core: Core) -> ComponentReport:
    """Live sessions, with their claude processes' memory (limits.memory)."""
    text = f"{len(core.sessions.live)} live sessions"
    memory = core.admission.memory
    measured = memory.measured
    if measured:
        total = sum(m.rss_bytes for m in measured.values())
        largest, size = max(((sid, m.rss_bytes) for sid, m in measured.items()), key=lambda x: x[1])
        text += f"; claude memory {total / MIB:.0f} MB, largest {size / MIB:.0f} MB ({largest})"
    over = sorted(sid for sid, m in measured.items() if m.over_limit)
    if over:
        text += f"; busy above daemon.limits.session_rss_mb: {', '.join(over)}"
    if memory.stopped:
        text += f"; {memory.stopped} idle claude process(es) stopped for their memory"
    return ComponentReport(True, text)
