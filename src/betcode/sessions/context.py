"""What every session shares: the store, the claude launch recipe, settings, the permission gate.

The permission gate is a Protocol here so that this layer does not import the permissions
package: ``permissions.bridge`` implements it and calls back into the session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HolderPlace
from betcode.claude.locate import ClaudeBinary
from betcode.protocol.messages import ControlRequest
from betcode.sessions.fanout import Frame
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter

if TYPE_CHECKING:
    from betcode.sessions.session import Session


class PermissionGate(Protocol):
    async def on_control_request(self, session: Session, request: ControlRequest) -> None:
        """A control_request from claude: decide, or persist and forward to clients."""

    async def on_cancel(self, session: Session, request_id: str) -> None:
        """claude withdrew a request (control_cancel_request)."""

    async def on_session_activity(self, session: Session) -> None:
        """Any client activity in the session (extends pending TTLs)."""

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        """Still-pending requests for a client that just caught up, flagged as replays."""

    def has_pending(self, session_id: str) -> bool:
        """Whether claude is waiting on an answer (the watchdog must not fire then)."""


@dataclass(frozen=True, slots=True)
class SessionSettings:
    client_queue_size: int = 1024
    lock_transfer_seconds: float = 10.0
    lock_idle_seconds: float = 300.0


@dataclass(slots=True)
class SessionContext:
    writer: StoreWriter
    reader: StoreReader
    claude_binary: ClaudeBinary
    child_env: Callable[[], Mapping[str, str]]
    process_policy: SupervisorPolicy
    permissions: PermissionGate
    settings: SessionSettings
    holders: HolderPlace | None = None  # None: claude is the daemon's child, ends with it
