"""The composition root: startup → serve → shutdown, and the only place signals are handled.

Startup order: config (`daemon_config.load_daemon_config`; `betcode daemon start`
then offers the first-run import) → the relay tunnel's identity (exit 65) → `--listen` checked,
the data dir's lock and the socket's lock taken (exit 69: one daemon per data dir and per
socket; nothing touched before this) → the web client's gateway socket and address bound →
claude version check (exit 72 missing, 78 too old) → database + migrations, and the audit log
must be there (exit 74 otherwise) → reconciliation in one transaction → the core (audit,
permission bridge, sessions), the capabilities (worktrees, subagents: the runs reconciliation
failed end as a run does) and the services → bind → the web client, health checks, interrupted
orchestrations and the relay tunnel start. Each step is a piece of `betcode.composition`.

SIGHUP reloads the configuration (`composition.reload`): valid settings are handed to each
part, an invalid file changes nothing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from typing import TYPE_CHECKING

from betcode import __version__
from betcode.composition.background import BackgroundTasks
from betcode.composition.core import Core, open_core
from betcode.composition.relay import (
    add_tunnel_component,
    attention_watchers,
    dial_relays,
    relay_tunnel,
)
from betcode.composition.reload import Reloads, apply_log_level, log_changes
from betcode.composition.services import core_services, health_monitor, version_service
from betcode.composition.startup_checks import (
    EXIT_CANNOT_LISTEN,
    Claims,
    DaemonStartupError,
    check_claude,
    claim_places,
    open_checked_database,
)
from betcode.composition.subagents import SubagentCapability
from betcode.composition.telemetry import Telemetry
from betcode.composition.web import listen_web, start_web, web_access, web_gateway
from betcode.composition.worktrees import WorktreeCapability
from betcode.daemon_config import DaemonConfig, settings_changes
from betcode.daemon_socket import BindError
from betcode.event_loop import running_event_loop
from betcode.permissions.bridge import PermissionBridge
from betcode.server.app import DaemonServer, RpcService
from betcode.sessions.manager import SessionManager

if TYPE_CHECKING:
    from betcode.server.web_access_service import WebAccessService
    from betcode.server.web_gateway_service import WebGatewayService
    from betcode.tunnel.client import TunnelClient
    from betcode.web.server import WebServer

__all__ = ["Daemon", "DaemonConfig", "DaemonStartupError", "run_daemon"]

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 5.0
HEALTH_INTERVAL_SECONDS = 5.0
KEEP_SESSIONS_SIGNAL = signal.SIGUSR2  # stop, but leave claude running under its holders


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.telemetry = Telemetry(config.settings.observability, config.environ)
        self.server: DaemonServer | None = None
        self.web: WebServer | None = None
        self._gateway: WebGatewayService | None = None
        self.core: Core | None = None
        self.worktrees: WorktreeCapability | None = None
        self.subagents: SubagentCapability | None = None
        self._tunnel: TunnelClient | None = None
        self._claims = Claims()
        self._tasks = BackgroundTasks()
        self._reloads = Reloads(config.settings_file)
        self._stopping = asyncio.Event()
        self._keep_sessions = False

    @property
    def sessions(self) -> SessionManager | None:
        return self.core.sessions if self.core is not None else None

    @property
    def bridge(self) -> PermissionBridge | None:
        return self.core.bridge if self.core is not None else None

    # ---- startup ----

    async def start(self) -> None:
        # Every step reads self.config anew: a SIGHUP during startup may have replaced it.
        # The refusals first, each with its exit code, before anything a refused start undoes.
        self._tunnel = relay_tunnel(self.config)
        socket_claim, tcp_address = claim_places(self.config, self._claims)
        self.web = listen_web(self.config, relayed=self._tunnel is not None)
        binary, claude = await check_claude(self.config)
        database = await open_checked_database(self.config)
        # The core, the capabilities on it, and the server made of their services.
        watchers = attention_watchers(self._tunnel)
        core, held = await open_core(self._current, binary, database, self._tasks, watchers)
        self.core = core
        await core.adopt(held)
        self.worktrees = worktrees = WorktreeCapability.open(self.config, core)
        self.subagents = subagents = SubagentCapability.open(self.config, core, worktrees.manager)
        # Before any client is served: no question of a run the restart ended looks pending.
        await subagents.manager.end_runs_left_behind()
        health = health_monitor(self.config, core, claude, self._reloads.report)
        add_tunnel_component(health, self._tunnel)
        web_services: list[RpcService] = []
        access: WebAccessService | None = None
        if self.web is not None:
            service, self._gateway = web_gateway(self.config)
            access_service, access = web_access()
            web_services += [service, access_service]
        self.server = DaemonServer(
            health=health,
            version=version_service(claude),
            services=[
                *self._core_services(core),
                *subagents.services(),
                *worktrees.services(),
                *web_services,
            ],
            limits=self.config.settings.grpc,
        )
        # Registered before serving (watchable at once), started once served.
        await subagents.orchestrations.load_interrupted()
        # With the delegates set and the runs left behind ended: before serving, as if read.
        await core.bridge.decide_left_unanswered()
        await core.admission.restore_queue(core.sessions.get)
        try:
            self.telemetry.start(core.live_state())
            await self.server.serve(socket_claim, tcp_address)
        except BindError as exc:
            raise DaemonStartupError(str(exc), EXIT_CANNOT_LISTEN) from exc
        if self.web is not None and access is not None:
            await start_web(
                self.web,
                core,
                health,
                self.config,
                self._tasks,
                client_silence=lambda: self.config.settings.client_silence_seconds,
                access=access,
                relay=self._tunnel,
            )
        self._tasks.start(health.run(HEALTH_INTERVAL_SECONDS))
        subagents.orchestrations.resume_loaded()
        dial_relays(self._tunnel, self._tasks)
        log.info(
            "betcode daemon %s serving on %s (event loop: %s)",
            __version__,
            self.config.socket_path,
            running_event_loop(),
        )

    def _core_services(self, core: Core) -> list[RpcService]:
        return core_services(
            self.config,
            self._current,
            core,
            self.telemetry,
            tcp_port=lambda: self.server.tcp_port if self.server else None,
            on_change=self.reload,
        )

    def _current(self) -> DaemonConfig:
        """The configuration as the last reload left it."""
        return self.config

    # ---- reload ----

    def reload(self) -> None:
        """SIGHUP (or a ConfigService change): read and validate the settings again; apply them
        only if all are valid."""
        fresh = self._reloads.read(self.config)
        if fresh is None:
            return
        changes = settings_changes(self.config.settings, fresh.settings)
        self.config = fresh
        if self.core is not None:
            self.core.sessions.apply_settings(fresh.sessions, fresh.policy, fresh.holders)
            self.core.sessions.max_sessions = fresh.settings.max_sessions
            self.core.admission.apply_settings(fresh.settings.limits)
        for capability in (self.subagents, self.worktrees):
            if capability is not None:
                capability.apply(fresh)
        apply_log_level(changes, fresh.settings)
        # The bridge after the log level: its "rules will be re-read" line obeys the new one.
        if self.core is not None:
            self.core.bridge.apply_settings(fresh.permissions)
            self.core.bridge.reload()
        log_changes(changes)

    # ---- serve / shutdown ----

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        loop.add_signal_handler(KEEP_SESSIONS_SIGNAL, self.request_stop_keeping_sessions)

    def _on_sighup(self) -> None:
        log.info("SIGHUP received")
        self.reload()

    def request_stop(self) -> None:
        self._stopping.set()

    def request_stop_keeping_sessions(self) -> None:
        """`daemon stop --keep-sessions` / `daemon restart` (SIGUSR2): exit, leaving every
        claude running under its holder for the next daemon."""
        log.info("stopping; claude processes keep running under their holders")
        self._keep_sessions = True
        self._stopping.set()

    async def serve_until_stopped(self) -> None:
        await self._stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        """Stop accepting, stop every claude (SIGTERM, grace, SIGKILL), flush, close."""
        if self.core is not None:
            # First: a turn that ends while the daemon stops (its claude got the signal too)
            # must not start a queued message the shutdown would lose; it stays stored.
            self.core.admission.queue.close()
        self._tasks.cancel()
        if self.web is not None:
            await self.web.stop()
        # Clients' streams last as long as their clients keep them: ended now, so that the
        # grace below waits only for requests in flight (it took its whole 5 s).
        if self.core is not None:
            self.core.sessions.end_streams()
        if self.subagents is not None:
            self.subagents.orchestrations.end_watches()
        if self.server is not None:
            await self.server.stop(SHUTDOWN_GRACE_SECONDS)
        if self._gateway is not None:
            await self._gateway.close()
        if self.subagents is not None:
            await self.subagents.orchestrations.shutdown()
        if self.core is not None:
            await self.core.close(keep_claude=self._keep_sessions)
        await self.telemetry.stop()
        # Last: a newcomer may open the database only once we are done with it.
        self._claims.release()


async def run_daemon(config: DaemonConfig) -> int:
    """Runs until SIGTERM/SIGINT; returns the process exit code."""
    daemon = Daemon(config)
    # Before start: a signal during startup must not find the default action (SIGHUP's ends
    # the process); a stop request made then is honoured once started.
    daemon.install_signal_handlers()
    try:
        await daemon.start()
    except DaemonStartupError as exc:
        log.error("%s", exc)
        await daemon.stop()
        return exc.exit_code
    # What startup allocated (modules, generated messages) lives as long as the daemon: keeping
    # it out of the collector's generations makes a full collection ~0 ms instead of 5-9 ms on
    # the event path (benchmarks/README.md).
    gc.freeze()
    await daemon.serve_until_stopped()
    return 0
