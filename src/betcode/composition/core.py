"""The core every transport and capability works on: the store's writer and reader, the audit
log, the permission bridge and the sessions. Opening it reconciles the store with what the last
daemon left (sessions whose claude outlived it under its holder go on running)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from betcode.claude.environment import build_child_env
from betcode.claude.holder.discovery import FoundHolder, find_holders
from betcode.claude.locate import ClaudeBinary
from betcode.composition.background import BackgroundTasks
from betcode.daemon_config import DaemonConfig
from betcode.limits.admission import TurnAdmission
from betcode.limits.memory import MemoryWatch
from betcode.observability.live_state import LiveState
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.rulebook import RuleBook
from betcode.sessions.context import SessionContext
from betcode.sessions.manager import SessionManager
from betcode.sessions.session import Session
from betcode.storage.audit import AuditRecorder
from betcode.storage.database import Database
from betcode.storage.holders import forget_stdin_of_gone_holders
from betcode.storage.reader import StoreReader
from betcode.storage.reconcile import reconcile
from betcode.storage.writer import StoreWriter

SessionWatcher = Callable[[Session], None]


@dataclass(frozen=True)
class Core:
    writer: StoreWriter
    reader: StoreReader
    audit: AuditRecorder
    bridge: PermissionBridge
    sessions: SessionManager
    admission: TurnAdmission

    async def adopt(self, found: Sequence[FoundHolder]) -> None:
        """Attaches each session to its claude found alive under its holder; the permission
        requests that claude is still waiting on wait on it again (those nobody is to answer
        are decided later: `PermissionBridge.decide_left_unanswered`)."""
        for holder in found:
            # What the last daemon committed of the session's lines: those after it are read
            # from the holder as usual, so the bridge looks for unanswered requests up to it.
            through_sequence, _ = await self.reader.max_sequences(holder.session_id)
            session = await self.sessions.adopt(holder)
            if session is not None:
                await self.bridge.reattached(session, holder.started_at, through_sequence)

    def live_state(self) -> LiveState:
        """What the metrics read from the running daemon when scraped."""
        sessions = self.sessions
        return LiveState(
            sessions_active=sessions.in_use,
            clients_connected=lambda: sum(len(session.hub) for session in sessions.live),
            lagging_clients=lambda: sum(session.hub.lagging() for session in sessions.live),
            writer_queue_depth=self.writer.queue_depth,
            limits=self.admission.reading,
        )

    async def close(self, *, keep_claude: bool) -> None:
        """Stops every session (or leaves each claude to its holder), then flushes and closes."""
        self.admission.queue.close()  # before the sessions' turns end (if the daemon did not)
        await self.sessions.shutdown(keep_claude=keep_claude)
        await self.bridge.close()
        await self.audit.flush()
        await self.writer.close()
        self.reader.close()


async def open_core(
    current: Callable[[], DaemonConfig],
    binary: ClaudeBinary,
    database: Database,
    tasks: BackgroundTasks,
    watchers: Sequence[SessionWatcher] = (),
) -> tuple[Core, list[FoundHolder]]:
    """The core, and the holders found alive for `Core.adopt` once the daemon holds the core
    (a reload meanwhile reaches its sessions). `current` is the configuration as the last
    reload left it: read once the store is reconciled, and for each new claude's environment.
    `watchers` see every session that comes alive."""
    writer, reader = StoreWriter(database), StoreReader(database)
    try:
        found = await find_holders(current().holders)
        held = frozenset(holder.session_id for holder in found)
        await writer.call(lambda c: reconcile(c, time.time(), held))  # logs its own report
        alive = [holder.link.holder_id for holder in found]
        await writer.call(lambda c: forget_stdin_of_gone_holders(c, alive))
    except BaseException:
        # No Core holds the store yet for the daemon's stop to close.
        await writer.close()
        reader.close()
        raise
    config = current()
    audit = AuditRecorder(writer)
    tasks.start(audit.run_retention(), name="audit-retention")
    bridge = PermissionBridge(
        writer,
        reader,
        rules=RuleBook(config.config_dir, config.rules),
        settings=config.permissions,
        audit=audit,
    )
    tasks.start(bridge.run_sweeper(), name="permission-sweeper")
    context = _session_context(config, current, binary, writer, reader, bridge)
    sessions = SessionManager(context, audit=audit, max_sessions=config.settings.max_sessions)
    sessions.on_register.extend(watchers)
    limits = config.settings.limits
    memory = MemoryWatch(lambda: sessions.live, bridge.has_pending, limits)
    tasks.start(memory.run(), name="memory-watch")
    admission = TurnAdmission(writer, bridge, limits, memory)
    tasks.start(admission.run_readings(), name="spend-readings")
    return Core(writer, reader, audit, bridge, sessions, admission), found


def _session_context(
    config: DaemonConfig,
    current: Callable[[], DaemonConfig],
    binary: ClaudeBinary,
    writer: StoreWriter,
    reader: StoreReader,
    bridge: PermissionBridge,
) -> SessionContext:
    scratch = config.data_dir / "claude-scratch"
    return SessionContext(
        writer=writer,
        reader=reader,
        claude_binary=binary,
        child_env=lambda: build_child_env(current().environ, scratch, current().env_allow),
        process_policy=config.policy,
        permissions=bridge,
        settings=config.sessions,
        holders=config.holders,
    )
