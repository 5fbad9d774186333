"""What the web handlers call: the daemon's own session manager, permission bridge and request
handling (the objects the gRPC services use), plus the web client's identity rules."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from betcode.core.connected import ConnectedClients
from betcode.core.converse import ConverseRequests, note_activity
from betcode.core.validation import check_id, invalid
from betcode.limits.admission import TurnAdmission
from betcode.permissions.bridge import PermissionBridge
from betcode.sessions.manager import SessionManager
from betcode.sessions.session import Session
from betcode.storage.clients import ClientType
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.web.events import EventJson

CLIENT_HEADER = "X-BetCode-Client"
CLIENT_PARAMETER = "client"
WEB_CLIENT_PREFIX = "web-"
WEB_CLIENT_TYPE: ClientType = "web"


@dataclass
class WebDomain:
    sessions: SessionManager
    bridge: PermissionBridge
    clients: ConnectedClients
    converse: ConverseRequests
    reader: StoreReader
    max_payload_bytes: int
    events: EventJson = field(default_factory=EventJson)

    async def session(self, session_id: str, client_id: str) -> Session:
        """The named session, loaded; a request in it is activity (as for gRPC requests: it
        pushes back the expiry of the session's pending permissions)."""
        session = await self.sessions.get(check_id(session_id, "session_id"))
        self.clients.seen(client_id)
        await note_activity(self.bridge, session)
        return session


def web_client_id(request: web.Request) -> str:
    """The page's own id (one per tab, kept across reloads), always `web-...` so the audit log
    and other clients tell a browser apart; a request without one gets a fresh id."""
    given = request.headers.get(CLIENT_HEADER) or request.query.get(CLIENT_PARAMETER)
    if not given:
        return f"{WEB_CLIENT_PREFIX}{uuid.uuid4()}"
    check_id(given, "client id")
    if not given.startswith(WEB_CLIENT_PREFIX):
        raise invalid(f"a web client id must start with {WEB_CLIENT_PREFIX!r}, got {given!r}")
    return given


def make_web_domain(
    sessions: SessionManager,
    bridge: PermissionBridge,
    writer: StoreWriter,
    reader: StoreReader,
    admission: TurnAdmission,
    *,
    max_payload_bytes: int,
    client_silence: Callable[[], float],
) -> WebDomain:
    clients = ConnectedClients(writer)
    converse = ConverseRequests(
        bridge,
        writer,
        clients,
        admission,
        silence_timeout=client_silence,
        viewers_interrupt=True,
    )
    return WebDomain(sessions, bridge, clients, converse, reader, max_payload_bytes)
