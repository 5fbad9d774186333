"""The registry of sessions: create, load on demand (seeding seqs from SQLite), list, delete;
it also applies reloaded settings to them all.

`daemon.max_sessions` bounds the sessions in use at once: a session is in use while it has a
claude process (running, starting or restarting) or an attached client. Creating one more is
refused (`SessionLimitReached`); attaching to, or sending to, an existing session never is.

Audited (storage.audit): session_create (also when refused), session_resume (a claude process
spawned with --resume), session_error (claude crashed too often: CRASHED) and session_complete
(the session was deleted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HeldClaude, HolderPlace, stdin_key
from betcode.claude.holder.discovery import FoundHolder
from betcode.claude.process import require_workdir
from betcode.claude.supervisor import SupervisorState
from betcode.protocol.writer import answered_request_id
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.session import Recalled, Session
from betcode.storage import holders as holder_rows
from betcode.storage import pending as pending_rows
from betcode.storage import sessions as session_rows
from betcode.storage import worktrees as worktree_rows
from betcode.storage.audit import AuditEvent, AuditRecorder
from betcode.storage.reader import lines_of_current_turn, newest_event
from betcode.v1 import agent_pb2, common_pb2

log = logging.getLogger(__name__)

MAX_SESSION_ID_CHARS = 128
# A client-chosen id of a new session: a UUID in its usual 8-4-4-4-12 hex spelling.
_CLIENT_CHOSEN_ID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
SUPERVISOR_ACTOR = "claude-supervisor"
UNKNOWN_CLIENT = "unknown-client"
# Supervisor states in which a session holds no claude process.
_WITHOUT_PROCESS = frozenset({SupervisorState.IDLE, SupervisorState.CRASHED})


class SessionNotFound(LookupError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id


class InvalidSessionRequest(ValueError):
    """A create/attach request that can never succeed as given."""


class WorktreeNotFound(LookupError):
    def __init__(self, worktree_id: str) -> None:
        super().__init__(f"no worktree with id {worktree_id!r}")
        self.worktree_id = worktree_id


class SessionLimitReached(Exception):
    """Creating a session would exceed daemon.max_sessions (sessions in use at once)."""

    def __init__(self, limit: int, in_use: int) -> None:
        super().__init__(
            f"cannot start a new session: {in_use} sessions are in use (with a claude process "
            f"or a connected client) and daemon.max_sessions is {limit}. Close a session's "
            "clients, delete a session, or raise daemon.max_sessions (settings.json, "
            "BETCODE_MAX_SESSIONS or `betcode daemon start --set max_sessions=N`, 1-1000)"
        )
        self.limit = limit
        self.in_use = in_use


class AuditedSession(Session):
    """A Session whose claude lifecycle is also written to the audit log."""

    def __init__(
        self,
        record: session_rows.SessionRecord,
        context: SessionContext,
        audit: AuditRecorder,
        *,
        line_seq: int,
        event_seq: int,
        allowed_tools: Sequence[str] = (),
    ) -> None:
        self._audit = audit
        super().__init__(
            record, context, line_seq=line_seq, event_seq=event_seq, allowed_tools=allowed_tools
        )

    def on_state(self, state: SupervisorState, detail: str) -> None:
        super().on_state(state, detail)
        resumed = self.supervisor.resumed_conversation
        if state is SupervisorState.RUNNING and resumed is not None:
            self._audit.record(
                AuditEvent(
                    event_type="session_resume",
                    actor_type="daemon",
                    actor_id=SUPERVISOR_ACTOR,
                    outcome="success",
                    session_id=self.id,
                    context={"claude_session_id": resumed},
                )
            )
        elif state is SupervisorState.CRASHED:
            self._audit.record(
                AuditEvent(
                    event_type="session_error",
                    actor_type="daemon",
                    actor_id=SUPERVISOR_ACTOR,
                    outcome="failure",
                    severity="error",
                    session_id=self.id,
                    error_code="SUBPROCESS_CRASHED",
                    error_message=detail,
                )
            )


def validate_session_id(session_id: str) -> None:
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidSessionRequest(
            f"session_id is {len(session_id)} characters; at most {MAX_SESSION_ID_CHARS} allowed"
        )
    if not session_id.isprintable() or any(ch.isspace() for ch in session_id):
        raise InvalidSessionRequest("session_id must be printable and contain no whitespace")


def validate_new_session_id(session_id: str) -> None:
    """An id a client chose for a session it creates must be a UUID (as BetCode's own are)."""
    if not _CLIENT_CHOSEN_ID.fullmatch(session_id):
        raise InvalidSessionRequest(
            f"no session with id {session_id[:MAX_SESSION_ID_CHARS]!r}, and it cannot be the id "
            "of a new session: a new session's id must be a UUID "
            "(e.g. 0b7e2c1a-5d43-4f6e-9a21-3c8d2e4f5a6b)"
        )


def _resolved(path: str) -> Path:
    return Path(path).expanduser().resolve()


def validate_working_directory(path: str) -> str:
    if not path:
        raise InvalidSessionRequest("working_directory is required to start a session")
    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        raise InvalidSessionRequest(f"working_directory must be absolute, got {path!r}")
    if not resolved.is_dir():
        raise InvalidSessionRequest(f"working_directory {path!r} does not exist or is not a folder")
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise InvalidSessionRequest(f"working_directory {path!r} is not readable")
    return str(resolved.resolve())


class SessionManager:
    """`max_sessions`: how many sessions may be in use at once (None: no limit); a reload may
    change it, and it applies to sessions created from then on."""

    def __init__(
        self,
        context: SessionContext,
        *,
        audit: AuditRecorder | None = None,
        max_sessions: int | None = None,
    ) -> None:
        self._ctx = context
        self._audit = audit if audit is not None else AuditRecorder(context.writer)
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self.on_register: list[Callable[[Session], None]] = []  # each session that comes alive
        self._loading = asyncio.Lock()
        self._creating_chosen_id = asyncio.Lock()  # concurrent starts of one new id: one session
        self._creating = 0

    @property
    def live(self) -> list[Session]:
        return list(self._sessions.values())

    def in_use(self) -> int:
        """Sessions with a claude process or an attached client (what max_sessions bounds)."""
        return sum(
            1
            for session in self.live  # a copy: the metrics endpoint reads this from its thread
            if len(session.hub) or session.supervisor.state not in _WITHOUT_PROCESS
        )

    async def create(
        self,
        *,
        working_directory: str,
        model: str = "",
        worktree_id: str | None = None,
        allowed_tools: Sequence[str] = (),
        name: str = "",
        client_id: str | None = None,
        session_id: str | None = None,
        claude_session_id: str | None = None,
    ) -> Session:
        """A new session; raises InvalidSessionRequest for a bad working directory and
        SessionLimitReached when max_sessions are in use. `client_id`: who asked (audit);
        `session_id`: the id to give it (the caller checked it is new), else a fresh UUID.
        `claude_session_id`: a conversation of claude's own that its first claude resumes.
        A session in a worktree runs in the worktree's directory, which must still be there
        (WorktreeMissing otherwise); `working_directory` may then be empty."""
        if worktree_id is not None:
            working_directory = await self._worktree_directory(worktree_id, working_directory)
        cwd = validate_working_directory(working_directory)
        self._check_capacity(client_id, cwd)
        session_id = session_id or str(uuid.uuid4())
        # Counted as in use from here: a create waiting on the writer holds its place.
        self._creating += 1
        try:
            record = await self._ctx.writer.call(
                lambda c: session_rows.create_session(
                    c,
                    session_id=session_id,
                    model=model,
                    working_directory=cwd,
                    now=time.time(),
                    worktree_id=worktree_id,
                    name=name,
                    claude_session_id=claude_session_id,
                )
            )
        finally:
            self._creating -= 1
        session = AuditedSession(
            record, self._ctx, self._audit, line_seq=0, event_seq=0, allowed_tools=allowed_tools
        )
        self._register(session)
        self._audit_create(client_id, session_id, {"working_directory": cwd}, None)
        # Clients learn the new session's id from this first event.
        session.emit(
            [
                agent_pb2.AgentEvent(
                    session_info=agent_pb2.SessionInfo(
                        session_id=session_id,
                        model=model,
                        working_directory=cwd,
                        worktree_id=worktree_id or "",
                    )
                )
            ]
        )
        return session

    async def get_or_create(
        self,
        session_id: str,
        *,
        working_directory: str,
        model: str = "",
        worktree_id: str | None = None,
        allowed_tools: Sequence[str] = (),
        client_id: str | None = None,
    ) -> tuple[Session, bool]:
        """The session `session_id` and False; or, when there is none, a new session with
        exactly that id (a UUID, else InvalidSessionRequest) and True. Starts racing to
        create the same id make one session: the others attach to it."""
        try:
            return await self.get(session_id), False
        except SessionNotFound:
            validate_new_session_id(session_id)
        async with self._creating_chosen_id:
            try:
                return await self.get(session_id), False
            except SessionNotFound:
                pass
            session = await self.create(
                working_directory=working_directory,
                model=model,
                worktree_id=worktree_id,
                allowed_tools=allowed_tools,
                client_id=client_id,
                session_id=session_id,
            )
            return session, True

    async def _worktree_directory(self, worktree_id: str, requested: str) -> str:
        worktree = await self._ctx.reader.read(lambda c: worktree_rows.get_worktree(c, worktree_id))
        if worktree is None:
            raise WorktreeNotFound(worktree_id)
        path = Path(worktree.path)
        if requested and await asyncio.to_thread(_resolved, requested) != path:
            raise InvalidSessionRequest(
                f"working_directory {requested!r} is not the directory of worktree "
                f"{worktree.name!r} ({path}); leave it empty to start there"
            )
        await require_workdir(path, worktree=True)
        return str(path)

    def busy_in_worktree(self, worktree_id: str) -> list[str]:
        """Why removing the worktree now would cut work short: its turns in progress."""
        return [
            f"a running turn in session {session.id}"
            for session in self._sessions.values()
            if session.record.worktree_id == worktree_id and session.turn_in_progress()
        ]

    async def close_worktree_sessions(self, worktree_id: str) -> int:
        """Stop the claude of each live session in the worktree; the rows and history stay."""
        closing = [s for s in self._sessions.values() if s.record.worktree_id == worktree_id]
        for session in closing:
            del self._sessions[session.id]
            session.lock.close()
        await asyncio.gather(*(session.close() for session in closing), return_exceptions=True)
        return len(closing)

    async def get(self, session_id: str) -> Session:
        validate_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        async with self._loading:
            session = self._sessions.get(session_id)
            if session is not None:
                return session
            record = await self._ctx.reader.read(lambda c: session_rows.get_session(c, session_id))
            if record is None:
                raise SessionNotFound(session_id)
            line_seq, event_seq = await self._ctx.reader.max_sequences(session_id)
            session = AuditedSession(
                record, self._ctx, self._audit, line_seq=line_seq, event_seq=event_seq
            )
            self._register(session)
            return session

    def _check_capacity(self, client_id: str | None, cwd: str) -> None:
        limit = self.max_sessions
        if limit is None:
            return
        in_use = self.in_use() + self._creating
        if in_use < limit:
            return
        refusal = SessionLimitReached(limit, in_use)
        context = {"working_directory": cwd, "max_sessions": str(limit)}
        self._audit_create(client_id, None, context, refusal)
        raise refusal

    def _audit_create(
        self,
        client_id: str | None,
        session_id: str | None,
        context: dict[str, str],
        refusal: SessionLimitReached | None,
    ) -> None:
        self._audit.record(
            AuditEvent(
                event_type="session_create",
                actor_type="user",
                actor_id=client_id or UNKNOWN_CLIENT,
                outcome="success" if refusal is None else "denied",
                severity="info" if refusal is None else "warn",
                session_id=session_id,
                error_code=None if refusal is None else "POOL_EXHAUSTED",
                error_message=None if refusal is None else str(refusal),
                context=context,
            )
        )

    def _register(self, session: Session) -> None:
        self._sessions[session.id] = session
        for listener in self.on_register:
            listener(session)

    def apply_settings(
        self,
        settings: SessionSettings,
        policy: SupervisorPolicy,
        holders: HolderPlace | None = None,
    ) -> None:
        """A settings reload: sessions opened from now on use `settings` and `policy`; live ones
        get the new input-lock timings at once, `policy` for their watchdog, idle reaping and
        next restarts (their crash budget, counted since they opened, stays), and `holders`
        (if given) for the claude processes they start from now on."""
        self._ctx.settings = settings
        self._ctx.process_policy = policy
        if self._ctx.holders is not None and holders is not None:
            self._ctx.holders = holders
        for session in self._sessions.values():
            session.lock.retime(settings.lock_transfer_seconds, settings.lock_idle_seconds)
            session.supervisor.policy = policy
            holding = session.supervisor.holding
            if holding is not None and holders is not None:
                session.supervisor.holding = dataclasses.replace(holding, place=holders)

    async def record(self, session_id: str) -> session_rows.SessionRecord:
        validate_session_id(session_id)
        record = await self._ctx.reader.read(lambda c: session_rows.get_session(c, session_id))
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def list(
        self, *, working_directory: str = "", worktree_id: str = "", limit: int = 0, offset: int = 0
    ) -> session_rows.SessionPage:
        return await self._ctx.reader.read(
            lambda c: session_rows.list_sessions(
                c,
                working_directory=working_directory or None,
                worktree_id=worktree_id or None,
                limit=limit or None,
                offset=offset,
            )
        )

    async def rename(self, session_id: str, name: str) -> None:
        validate_session_id(session_id)
        if not await self._ctx.writer.call(
            lambda c: session_rows.set_name(c, session_id, name, time.time())
        ):
            raise SessionNotFound(session_id)

    async def move(
        self, session_id: str, directory: str, worktree_id: str | None = None
    ) -> session_rows.SessionRecord:
        """Points a session at another working directory (one whose own is gone, say): its
        claude, if one runs, is stopped; the next message starts one there that resumes the
        conversation (claude finds a conversation's transcript by its id from any directory,
        and goes on appending to it where it is). A directory that is a worktree's makes it
        a session of that worktree."""
        record = await self.record(session_id)
        target = Path(directory)
        if not target.is_absolute():
            raise InvalidSessionRequest(f"the directory must be an absolute path: {directory!r}")
        if not await asyncio.to_thread(target.is_dir):
            raise InvalidSessionRequest(f"{directory} is not an existing directory")
        session = self._sessions.get(session_id)
        if session is not None and session.turn_in_progress():
            raise InvalidSessionRequest(
                f"session {session_id} is in the middle of a turn; move it once the turn is over"
            )
        if worktree_id is None:
            worktree = await self._ctx.reader.read(
                lambda c: worktree_rows.find_worktree_by_path(c, directory)
            )
            worktree_id = None if worktree is None else worktree.id
        if session is not None:
            del self._sessions[session_id]
            session.lock.close()
            await session.close()
        await self._ctx.writer.call(
            lambda c: session_rows.move_session(c, session_id, directory, worktree_id, time.time())
        )
        log.info("session %s moved from %s to %s", session_id, record.working_directory, directory)
        return await self.record(session_id)

    async def move_all(
        self, from_directory: str, directory: str, worktree_id: str
    ) -> tuple[str, ...]:
        """Every session of `from_directory` moved to `directory` (a restored worktree's)."""
        moving = await self._ctx.reader.read(lambda c: session_rows.sessions_in(c, from_directory))
        for session_id in moving:
            await self.move(session_id, directory, worktree_id)
        return tuple(moving)

    async def delete(self, session_id: str, client_id: str | None = None) -> bool:
        """Stops the session's claude and removes its rows; its audit trail stays."""
        validate_session_id(session_id)
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.lock.close()
            await session.close()
        deleted = await self._ctx.writer.call(lambda c: session_rows.delete_session(c, session_id))
        if deleted:
            self._audit.record(
                AuditEvent(
                    event_type="session_complete",
                    actor_type="user",
                    actor_id=client_id or UNKNOWN_CLIENT,
                    outcome="success",
                    session_id=session_id,
                    context={"reason": "deleted"},
                )
            )
        return deleted

    async def adopt(self, found: FoundHolder) -> Session | None:
        """Re-attach a session to its claude, found alive under its holder after a restart:
        the holder sends what the session has not committed of it, then claude's live output.
        None when the session no longer exists (that claude is stopped)."""
        holders = self._ctx.holders
        try:
            session = await self.get(found.session_id)
        except (SessionNotFound, InvalidSessionRequest):
            session = None
        if session is None or holders is None:
            log.warning("holder of unknown session %s: stopping its claude", found.session_id)
            await asyncio.to_thread(found.abandon)
            return None
        link = found.link
        (
            offset,
            unconfirmed,
            journaled,
            answers,
            control_lines,
            turn_lines,
            last_status,
        ) = await self._ctx.reader.read(
            lambda c: (
                holder_rows.committed_offset(c, session.id, link.holder_id),
                holder_rows.unconfirmed_stdin(c, link.holder_id),
                holder_rows.journaled_keys(c, link.holder_id),
                pending_rows.answers_written_since(c, session.id, found.started_at),
                pending_rows.control_lines_since(c, session.id, found.started_at),
                # Committed in the same transactions as the offset: exactly what the holder
                # will not send again.
                lines_of_current_turn(c, session.id, found.started_at),
                newest_event(c, session.id, "status_change", _set_by_translator),
            )
        )
        # An answer is logged before it is journaled: one logged by a daemon killed before
        # the journal entry was committed is in neither the journal nor the pending rows.
        logged_answers = [
            line + b"\n"
            for direction, line in control_lines
            if direction == "in" and answered_request_id(line) is not None
        ]
        holding = session.supervisor.holding
        process = HeldClaude(
            session.on_lines,
            holders,
            session.id,
            max_line_bytes=self._ctx.process_policy.max_line_bytes,
            journal=None if holding is None else holding.journal,
        )
        # Whatever the last daemon may have left on its way to claude: the journal's lines not
        # confirmed yet, and the answers recorded or logged but never journaled (the holder
        # takes each key once; one it confirmed is claude's already, and not sent again).
        never_journaled = {
            key: line
            for line in [*answers, *logged_answers]
            if (key := stdin_key(line)) not in journaled
        }
        resend = dict(unconfirmed) | never_journaled
        process.adopt(link, offset, resend.items())
        session.adopt(process, Recalled(turn_lines, last_status))
        log.info(
            "session %s: re-attached to claude pid %d at byte %d of its output (%d stdin "
            "line(s) sent again)",
            session.id,
            link.claude_pid,
            offset,
            len(resend),
        )
        return session

    def end_streams(self) -> None:
        """The daemon is stopping: every session's client streams end now."""
        for session in self._sessions.values():
            session.end_streams()

    async def shutdown(self, *, keep_claude: bool = False) -> None:
        """Close every session; `keep_claude`: leave their claude processes running under
        their holders, for the next daemon to re-attach."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.lock.close()
        await asyncio.gather(
            *(
                session.close(keep_claude=keep_claude, daemon_stops=not keep_claude)
                for session in sessions
            ),
            return_exceptions=True,
        )


def _set_by_translator(status_event: bytes) -> bool:
    """Every StatusChange but WAITING_FOR_USER, which the permission layer emits on its own
    (the translator's status stays what it was)."""
    status = agent_pb2.AgentEvent.FromString(status_event).status_change.status
    return bool(status != common_pb2.AGENT_STATUS_WAITING_FOR_USER)
