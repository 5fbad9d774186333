"""The client side of the daemon's gRPC API: where the daemon is, named errors, and a typed
client over one grpc.aio channel. The self-healing Converse stream is in ``conversation``."""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from betcode.cli.relay_login import (
    RelayAuth,
    RelayChoice,
    access_token,
    relay_channel,
    relay_choice,
    relay_unreachable,
)
from betcode.config.dirs import config_dir, default_socket_path
from betcode.core.errors import error_code_of, error_details_of
from betcode.remote.frames import ACK_METADATA, ACK_RECORDED, BUFFERED_TRAILER
from betcode.v1 import agent_pb2, agent_pb2_grpc, commands_pb2, commands_pb2_grpc

StubT = TypeVar("StubT")
ResponseT = TypeVar("ResponseT")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CLIENT_ID_METADATA_KEY = "x-client-id"
START_DAEMON_HINT = "start it with `betcode daemon start`"


# --- who this client is ----------------------------------------------------------------------

CLIENT_ID_PREFIX = "cli:"
MAX_CLIENT_ID_CHARS = 128  # the daemon keeps no more of an x-client-id
MAX_NAME_CHARS = 48  # of the user name and of the host name, so an id always fits
YOU = "you"
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def make_client_id(user: str, host: str, pid: int) -> str:
    """``cli:<user>@<host>:<pid>-<random>``. Unique per process, because the daemon's input
    lock tells terminals apart by it; the ``user@host`` part is the same for every terminal
    of one person on one machine, so the chat can say "you" and others can read who it is."""
    return f"{CLIENT_ID_PREFIX}{_name(user)}@{_name(host)}:{pid}-{uuid.uuid4().hex[:8]}"


def _name(part: str) -> str:
    """A user or host name as metadata may carry it (ASCII, no spaces or separators)."""
    return _NOT_IN_NAME.sub("-", part).strip("-")[:MAX_NAME_CHARS] or "unknown"


def client_owner(client_id: str) -> str | None:
    """The ``user@host`` of a BetCode CLI client id; None for any other client's id."""
    if not client_id.startswith(CLIENT_ID_PREFIX):
        return None
    owner, separator, _process = client_id.removeprefix(CLIENT_ID_PREFIX).rpartition(":")
    return owner if separator and "@" in owner else None


def client_label(client_id: str, own_client_id: str) -> str:
    """How a client is named to this one: "you" for any terminal of the same user@host (this
    one, an earlier one, another one), user@host for another person's CLI, else the id."""
    owner = client_owner(client_id)
    if client_id == own_client_id or (owner is not None and owner == client_owner(own_client_id)):
        return YOU
    return owner or client_id


def other_client_label(client_id: str, own_client_id: str) -> str:
    """Like client_label, for a client that is not this process: "you, in another terminal"
    when it is the same user@host."""
    label = client_label(client_id, own_client_id)
    return "you, in another terminal" if label == YOU and client_id != own_client_id else label


def _user_name() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


CLIENT_ID = make_client_id(_user_name(), socket.gethostname().split(".")[0], os.getpid())
"""This process's client id, the same on every connection it opens (input lock identity)."""


# --- errors --------------------------------------------------------------------------------


class DaemonError(Exception):
    """A call to the daemon failed; ``exit_code`` is the CLI's exit code for it
    (docs/CLI.md#exit-codes)."""

    exit_code = 7

    def __init__(
        self, message: str, *, code: str = "", details: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = dict(details or {})


class DaemonUnavailable(DaemonError):
    exit_code = 2


class SessionNotFound(DaemonError):
    exit_code = 6


class RequestQueued(DaemonUnavailable):
    """The machine is offline and the relay keeps the request until it reconnects: not an
    error for the command that made it (exit 0; docs/RELAY.md "A machine that is offline")."""

    exit_code = 0


class RequestRejected(DaemonError):
    """The daemon refused the request (bad argument, no input lock, wrong state, rate limit)."""


EXIT_CODE_OF_STATUS = {
    grpc.StatusCode.PERMISSION_DENIED: 3,
    grpc.StatusCode.UNAUTHENTICATED: 3,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 4,
    grpc.StatusCode.INVALID_ARGUMENT: 5,
    grpc.StatusCode.ALREADY_EXISTS: 5,  # a name taken (a worktree, a repository): a user error
    grpc.StatusCode.OUT_OF_RANGE: 5,
    grpc.StatusCode.FAILED_PRECONDITION: 1,
}


def daemon_error(error: grpc.aio.AioRpcError, address: DaemonAddress) -> DaemonError:
    """The named error for a failed call, with the daemon's application code and details."""
    status = error.code()
    code = error_code_of(error)
    details = error_details_of(error)
    message = error.details() or status.name
    app_code = code.value if code is not None else ""
    if status == grpc.StatusCode.UNAVAILABLE and address.relay is not None:
        place = dict(error.trailing_metadata() or ()).get(BUFFERED_TRAILER)
        if place:
            return RequestQueued(
                f"queued on the relay until {address.relay.machine_id} reconnects "
                f"(place {place}); it runs then, once (`betcode machine dropped "
                f"{address.relay.machine_id}` lists any it refuses)",
                code=app_code,
                details=details,
            )
    unreached = status == grpc.StatusCode.UNAVAILABLE and "failed to connect" in message
    if unreached and address.relay is not None:
        return DaemonUnavailable(relay_unreachable(address.relay, message), code=app_code)
    if status == grpc.StatusCode.UNAVAILABLE:
        return DaemonUnavailable(
            f"the BetCode daemon at {address.where} is not answering ({message}); "
            f"{START_DAEMON_HINT if address.relay is None else 'is its daemon running?'}",
            code=app_code,
            details=details,
        )
    if status == grpc.StatusCode.NOT_FOUND:
        return SessionNotFound(message, code=app_code, details=details)
    rejected = RequestRejected(message, code=app_code, details=details)
    rejected.exit_code = EXIT_CODE_OF_STATUS.get(status, 7)
    return rejected


# --- where the daemon listens --------------------------------------------------------------


@dataclass(frozen=True)
class DaemonAddress:
    path: Path
    source: str  # where the path came from, for messages
    relay: RelayChoice | None = None  # set: reach the daemon of relay.machine_id through it

    @property
    def target(self) -> str:
        return f"unix:{self.path}"

    @property
    def where(self) -> str:
        if self.relay is not None:
            return f"machine {self.relay.machine_id} (via relay {self.relay.url})"
        return str(self.path)


def resolve_daemon_address(explicit: str | os.PathLike[str] | None = None) -> DaemonAddress:
    """--socket, else $BETCODE_SOCKET, else $XDG_RUNTIME_DIR/betcode/daemon.sock, else
    <config dir>/daemon.sock (betcode.config.dirs owns the rule). With the global ``--relay``
    or ``--machine`` option, the daemon of that machine, through the relay."""
    relay = relay_choice(need_machine=True)
    if relay is not None:
        return DaemonAddress(Path(relay.url), "--relay", relay)
    if explicit:
        return DaemonAddress(Path(explicit).expanduser().absolute(), "--socket")
    source = "BETCODE_SOCKET" if os.environ.get("BETCODE_SOCKET") else "default"
    return DaemonAddress(default_socket_path(config_dir()).absolute(), source)


async def check_daemon_listening(address: DaemonAddress) -> None:
    """Raises DaemonUnavailable at once when nothing listens at the socket (instead of letting
    gRPC retry until a timeout)."""
    where = f"{address.path} (from {address.source})"
    try:
        _reader, writer = await asyncio.open_unix_connection(address.path)
    except FileNotFoundError:
        reason = f"no daemon socket at {where}"
    except ConnectionRefusedError:
        reason = f"nothing listens on {where}; the daemon that made it has stopped"
    except PermissionError:
        reason = f"no permission to open {where}; it belongs to another user"
    except OSError as error:
        reason = f"cannot connect to {where}: {error.strerror or error}"
    else:
        writer.close()
        return
    raise DaemonUnavailable(f"BetCode daemon is not running: {reason}; {START_DAEMON_HINT}")


# --- the typed client ----------------------------------------------------------------------


class DaemonClient:
    """One grpc.aio channel to the daemon with typed AgentService calls. Every call carries
    this process's client id (``x-client-id``)."""

    def __init__(
        self,
        address: DaemonAddress,
        *,
        client_id: str = CLIENT_ID,
        channel: grpc.aio.Channel | None = None,
        relay_auth: RelayAuth | None = None,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self._relay_auth = relay_auth
        self._channel = channel or grpc.aio.insecure_channel(
            address.target,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.use_local_subchannel_pool", 1),
                # The channel's own reconnect schedule follows docs/GRPC.md#reconnecting too. Not
                # grpc.min_reconnect_backoff_ms: gRPC also takes it as the connect deadline,
                # and 100 ms failed calls to a daemon too busy to greet at once.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 30_000),
            ],
        )
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        self._commands = commands_pb2_grpc.CommandServiceStub(self._channel)

    @classmethod
    async def connect(cls, address: DaemonAddress, *, client_id: str = CLIENT_ID) -> DaemonClient:
        """A client for a daemon known to be listening (else DaemonUnavailable); through the
        relay with a fresh access token when the address names one."""
        if address.relay is not None:
            return await cls._through_relay(address, address.relay, client_id)
        await check_daemon_listening(address)
        return cls(address, client_id=client_id)

    @classmethod
    async def _through_relay(
        cls, address: DaemonAddress, relay: RelayChoice, client_id: str
    ) -> DaemonClient:
        """Bearer token + machine id on every call; every message sealed for the daemon."""
        from betcode.cli.relay_e2e import EncryptingChannel, open_session
        from betcode.remote.e2e import ClientSession

        channel = relay_channel(relay)
        try:
            auth = RelayAuth(channel, relay, await access_token(channel, relay))
            try:
                session = await open_session(channel, relay.machine_id, auth.metadata)
            except grpc.aio.AioRpcError as error:
                raise daemon_error(error, address) from None
        except BaseException:
            await channel.close()
            raise

        async def rekey() -> ClientSession:
            return await open_session(channel, relay.machine_id, auth.metadata)

        auth.start()
        return cls(
            address,
            client_id=client_id,
            channel=EncryptingChannel(channel, session, rekey),
            relay_auth=auth,
        )

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """Every call's: this client's id, and through a relay its current token and machine."""
        relayed = self._relay_auth.metadata if self._relay_auth is not None else ()
        return ((CLIENT_ID_METADATA_KEY, self.client_id), *relayed)

    async def close(self) -> None:
        if self._relay_auth is not None:
            await self._relay_auth.close()
        await self._channel.close()

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def open_converse(self) -> Any:
        """A raw Converse call (grpc.aio StreamStreamCall); ConversationStream drives it."""
        return self._stub.Converse(metadata=self._metadata)

    async def send_recorded(self, session_id: str, content: str, client_type: str) -> None:
        """One message into an existing session, returning once the daemon recorded it (it
        ends the call then: ACK_RECORDED). Through a relay to an offline machine this raises
        RequestQueued: the relay keeps the message and delivers it once, its idempotency key
        making a second delivery a no-op (docs/RELAY.md "A machine that is offline")."""
        start = agent_pb2.StartConversation(session_id=session_id, client_type=client_type)
        message = agent_pb2.UserMessage(content=content, idempotency_key=str(uuid.uuid4()))
        requests = [agent_pb2.AgentRequest(start=start), agent_pb2.AgentRequest(message=message)]
        call = self._stub.Converse(
            iter(requests), metadata=(*self._metadata, (ACK_METADATA, ACK_RECORDED))
        )
        try:
            async for event in call:
                if event.WhichOneof("event") == "error" and event.sequence == 0:
                    # Refused (this client's own error event): said as the daemon says it.
                    raise RequestRejected(event.error.message, code=event.error.code)
        except grpc.aio.AioRpcError as error:
            raise daemon_error(error, self.address) from None

    def open_resume_batched(self, session_id: str, from_sequence: int, *, follow: bool) -> Any:
        """A raw ResumeSessionBatched call (grpc.aio UnaryStreamCall of AgentEventBatch): the
        stored events after `from_sequence`, an empty batch, then live ones if `follow`."""
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=from_sequence, follow=follow
        )
        return self._stub.ResumeSessionBatched(request, metadata=self._metadata)

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            raise daemon_error(error, self.address) from None

    def service_stub(self, stub_class: Callable[[grpc.aio.Channel], StubT]) -> StubT:
        """A stub of another betcode.v1 service on this client's channel; call it through
        `call` so a failure becomes the same DaemonError."""
        return stub_class(self._channel)

    async def call(self, method: Callable[..., Awaitable[ResponseT]], request: Any) -> ResponseT:
        response: ResponseT = await self._unary(method, request)
        return response

    async def list_sessions(
        self, *, working_directory: str = "", worktree_id: str = "", limit: int = 0, offset: int = 0
    ) -> agent_pb2.ListSessionsResponse:
        request = agent_pb2.ListSessionsRequest(
            working_directory=working_directory, worktree_id=worktree_id, limit=limit, offset=offset
        )
        response: agent_pb2.ListSessionsResponse = await self._unary(
            self._stub.ListSessions, request
        )
        return response

    async def most_recent_session(
        self, working_directory: str = ""
    ) -> agent_pb2.SessionSummary | None:
        """The session updated last (in ``working_directory`` when given), for --continue."""
        sessions = (await self.list_sessions(working_directory=working_directory)).sessions
        return max(sessions, key=lambda s: s.updated_at.ToNanoseconds(), default=None)

    async def request_input_lock(self, session_id: str) -> agent_pb2.InputLockResponse:
        request = agent_pb2.InputLockRequest(session_id=session_id)
        response: agent_pb2.InputLockResponse = await self._unary(
            self._stub.RequestInputLock, request
        )
        return response

    async def cancel_turn(self, session_id: str) -> bool:
        request = agent_pb2.CancelTurnRequest(session_id=session_id)
        response: agent_pb2.CancelTurnResponse = await self._unary(self._stub.CancelTurn, request)
        return response.was_active

    async def rename_session(self, session_id: str, name: str) -> None:
        request = agent_pb2.RenameSessionRequest(session_id=session_id, name=name)
        await self._unary(self._stub.RenameSession, request)

    async def set_session_limits(
        self, session_id: str, cost_usd: float | None
    ) -> agent_pb2.SetSessionLimitsResponse:
        request = agent_pb2.SetSessionLimitsRequest(session_id=session_id, cost_usd=cost_usd)
        response: agent_pb2.SetSessionLimitsResponse = await self._unary(
            self._stub.SetSessionLimits, request
        )
        return response

    async def get_session_limits(self, session_id: str) -> agent_pb2.SetSessionLimitsResponse:
        request = agent_pb2.GetSessionLimitsRequest(session_id=session_id)
        response: agent_pb2.SetSessionLimitsResponse = await self._unary(
            self._stub.GetSessionLimits, request
        )
        return response

    async def move_session(self, session_id: str, directory: str) -> agent_pb2.SessionSummary:
        request = agent_pb2.MoveSessionRequest(session_id=session_id, working_directory=directory)
        response: agent_pb2.MoveSessionResponse = await self._unary(self._stub.MoveSession, request)
        return response.session

    async def delete_session(self, session_id: str) -> bool:
        request = agent_pb2.DeleteSessionRequest(session_id=session_id)
        response: agent_pb2.DeleteSessionResponse = await self._unary(
            self._stub.DeleteSession, request
        )
        return response.deleted

    async def list_session_grants(self, session_id: str) -> list[agent_pb2.SessionGrantEntry]:
        request = agent_pb2.ListSessionGrantsRequest(session_id=session_id)
        response: agent_pb2.ListSessionGrantsResponse = await self._unary(
            self._stub.ListSessionGrants, request
        )
        return list(response.grants)

    async def list_pending_permissions(
        self, session_id: str = ""
    ) -> list[agent_pb2.PendingPermission]:
        request = agent_pb2.ListPendingPermissionsRequest(session_id=session_id)
        response: agent_pb2.ListPendingPermissionsResponse = await self._unary(
            self._stub.ListPendingPermissions, request
        )
        return list(response.pending)

    async def answer_permission(
        self, request: agent_pb2.AnswerPermissionRequest
    ) -> agent_pb2.AnswerPermissionResponse:
        response: agent_pb2.AnswerPermissionResponse = await self._unary(
            self._stub.AnswerPermission, request
        )
        return response

    async def compact_session(self, session_id: str) -> agent_pb2.CompactSessionResponse:
        request = agent_pb2.CompactSessionRequest(session_id=session_id)
        response: agent_pb2.CompactSessionResponse = await self._unary(
            self._stub.CompactSession, request
        )
        return response

    # --- CommandService (the chat's palette) ---

    async def command_registry(self, session_id: str) -> list[commands_pb2.CommandEntry]:
        request = commands_pb2.GetCommandRegistryRequest(session_id=session_id)
        response: commands_pb2.GetCommandRegistryResponse = await self._unary(
            self._commands.GetCommandRegistry, request
        )
        return list(response.commands)

    async def list_path(
        self, session_id: str, query: str, max_results: int = 0
    ) -> list[commands_pb2.PathEntry]:
        request = commands_pb2.ListPathRequest(
            session_id=session_id, query=query, max_results=max_results
        )
        response: commands_pb2.ListPathResponse = await self._unary(
            self._commands.ListPath, request
        )
        return list(response.entries)

    async def list_agents(
        self, session_id: str, query: str, max_results: int = 0
    ) -> list[commands_pb2.AgentInfo]:
        request = commands_pb2.ListAgentsRequest(
            session_id=session_id, query=query, max_results=max_results
        )
        response: commands_pb2.ListAgentsResponse = await self._unary(
            self._commands.ListAgents, request
        )
        return list(response.agents)

    async def run_service_command(
        self, session_id: str, command: str, args: list[str]
    ) -> list[commands_pb2.ServiceCommandOutput]:
        """The command's whole output (service commands print a line or two)."""
        request = commands_pb2.ExecuteServiceCommandRequest(
            session_id=session_id, command=command, args=args
        )
        call = self._commands.ExecuteServiceCommand(request, metadata=self._metadata)
        try:
            return [output async for output in call]
        except grpc.aio.AioRpcError as error:
            raise daemon_error(error, self.address) from None
