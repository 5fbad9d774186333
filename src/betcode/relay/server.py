"""One relay instance: NATS (its own embedded server, or the given cluster), the accounts
database (SQLite, or PostgreSQL shared by every instance), the one client address (relay/front.py:
gRPC clients and browsers on one TLS port) and the daemons' mTLS port: AuthService,
MachineService, TunnelService, PushRelayService, the routed daemon services and the web front
(relay/web.py)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import ssl
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import nats
from nats.aio.client import Client as Nats

from betcode.relay.accounts import Accounts, Database, open_database
from betcode.relay.auth_service import AuthService, Registration
from betcode.relay.buffer import BufferSettings, OfflineBuffer
from betcode.relay.front import HELLO_TIMEOUT_SECONDS, FrontDoor, ListenRefused, SplicedPeers
from betcode.relay.layout import RelayFiles
from betcode.relay.machine_service import DEFAULT_MACHINES_PER_USER, MachineService
from betcode.relay.nats_server import NatsServer, check_external_nats
from betcode.relay.notifications import Notifications, NotifySettings
from betcode.relay.notify_limits import SharedLimits
from betcode.relay.push_delivery import PushRelay, PushRelaySettings
from betcode.relay.routing import Router
from betcode.relay.tokens import ACCESS_TTL_SECONDS, TokenIssuer
from betcode.relay.tunnels import TunnelService, TunnelTiming
from betcode.relay.web import RelayWeb
from betcode.remote import frames
from betcode.v1 import auth_pb2_grpc, machine_pb2_grpc, push_relay_pb2_grpc, tunnel_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:8443"
DEFAULT_TUNNEL_LISTEN = "127.0.0.1:8444"


@dataclass(frozen=True)
class RelayOptions:
    files: RelayFiles
    listen: str = DEFAULT_LISTEN
    tunnel_listen: str = DEFAULT_TUNNEL_LISTEN
    nats_urls: Sequence[str] = ()
    nats_credentials_file: Path | None = None  # a NATS .creds file (JWT + nkey seed)
    nats_ca: Path | None = None  # the CA of tls:// NATS servers
    database_url: str | None = None
    relay_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    tls: tuple[Path, Path] | None = None  # (cert, key) instead of the files' server pair
    timing: TunnelTiming = field(default_factory=TunnelTiming)
    buffer: BufferSettings = field(default_factory=BufferSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    registration: Registration = Registration.INVITE
    access_token_seconds: int = ACCESS_TTL_SECONDS
    machines_per_user: int = DEFAULT_MACHINES_PER_USER
    push: PushRelaySettings = field(default_factory=PushRelaySettings)
    hello_timeout: float = HELLO_TIMEOUT_SECONDS  # for a client's TLS ClientHello on `listen`


class Relay:
    def __init__(self, options: RelayOptions) -> None:
        self.options = options
        self.nats_server: NatsServer | None = None
        self.nc: Nats | None = None
        self.database: Database | None = None
        self.server: grpc.aio.Server | None = None
        self.router: Router | None = None
        self.tunnels: TunnelService | None = None
        self.buffer: OfflineBuffer | None = None
        self.notifications: Notifications | None = None
        self.push: PushRelay | None = None
        self.port = 0
        self.tunnel_port = 0
        self.web: RelayWeb | None = None
        self.front: FrontDoor | None = None

    async def start(self) -> None:
        files = self.options.files
        authority = files.authority()
        urls = list(self.options.nats_urls)
        if urls:
            await check_external_nats(urls, credentials_file=self.options.nats_credentials_file)
        else:
            self.nats_server = NatsServer(files.nats_dir)
            await self.nats_server.start()
            urls = [self.nats_server.url]
        self.nc = await nats.connect(
            servers=urls,
            name=f"betcode-relay-{self.options.relay_id}",
            user_credentials=(
                str(self.options.nats_credentials_file)
                if self.options.nats_credentials_file
                else None
            ),
            tls=(
                ssl.create_default_context(cafile=str(self.options.nats_ca))
                if self.options.nats_ca
                else None
            ),
        )
        self.database = await open_database(self.options.database_url, files.accounts_db)
        accounts = Accounts(self.database)
        issuer = TokenIssuer(
            accounts, files.jwt_secret(), access_ttl=self.options.access_token_seconds
        )
        self.router = Router(self.nc, self.options.relay_id, accounts, issuer)
        await self.router.start()
        self.tunnels = TunnelService(
            self.nc, self.options.relay_id, accounts, authority.cert, self.options.timing
        )
        self.buffer = OfflineBuffer(self.nc, self.options.buffer, accounts)
        await self.buffer.start()
        self.router.buffer = self.buffer
        self.tunnels.on_online = self.buffer.deliver
        self.notifications = Notifications(
            self.options.notify,
            limits=await SharedLimits.open(self.nc) if self.options.notify.webhook else None,
        )
        self.tunnels.notifications = self.notifications
        self.tunnels.authority = authority
        front_secret = secrets.token_urlsafe(32)
        peers = SplicedPeers()
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", frames.MAX_FRAME_BYTES),
                ("grpc.max_receive_message_length", frames.MAX_FRAME_BYTES),
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_timeout_ms", 20_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ]
        )
        auth = AuthService(accounts, issuer, self.options.registration, front_secret, peers)
        auth.device_revoked = self.tunnels.device_revoked
        auth_pb2_grpc.add_AuthServiceServicer_to_server(auth, self.server)
        machines = MachineService(accounts, issuer, authority, self.options.machines_per_user)
        machine_pb2_grpc.add_MachineServiceServicer_to_server(machines, self.server)
        tunnel_pb2_grpc.add_TunnelServiceServicer_to_server(self.tunnels, self.server)
        self.push = PushRelay(
            self.options.push, accounts, authority.cert, await SharedLimits.open(self.nc)
        )
        push_relay_pb2_grpc.add_PushRelayServiceServicer_to_server(self.push, self.server)
        self.server.add_generic_rpc_handlers((self.router,))
        cert_file, key_file = self.options.tls or (files.server_cert, files.server_key)
        pair = [(key_file.read_bytes(), cert_file.read_bytes())]
        # Clients reach grpcio through the front door's splice (on loopback: TLS is end to end,
        # grpcio terminates it); daemons on a port of their own, where they must present their
        # machine certificate, verified against the relay's CA by TLS itself (gRPC has no "ask
        # for a certificate but let callers without one in" mode).
        grpc_port = self.server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(pair))
        try:
            self.tunnel_port = self.server.add_secure_port(
                self.options.tunnel_listen,
                grpc.ssl_server_credentials(
                    pair, root_certificates=files.ca_cert.read_bytes(), require_client_auth=True
                ),
            )
        except RuntimeError:  # grpcio says no more than "Failed to bind"
            raise ListenRefused(f"cannot listen on {self.options.tunnel_listen}") from None
        machines.tunnel_port = self.tunnel_port
        await self.server.start()
        root = None if self.options.tls else files.ca_cert.read_bytes()
        self.web = RelayWeb(cert_file, key_file, root, front_secret)
        web_server = await self.web.start(grpc_port)
        self.front = FrontDoor(
            self.options.listen,
            web_server,
            self.web.tls,
            grpc_port,
            peers,
            hello_timeout=self.options.hello_timeout,
        )
        await self.front.start()
        self.port = self.front.port
        log.info("relay %s listening on port %d", self.options.relay_id, self.port)

    async def stop(self, grace: float = 2.0) -> None:
        if self.tunnels is not None:
            # DRAIN: the daemons move to another relay now, not after their next timeout.
            await self.tunnels.drain()
            await asyncio.sleep(min(grace, 0.5))
        if self.front is not None:
            self.front.stop_accepting()
        if self.web is not None:
            await self.web.stop()
        if self.server is not None:
            await self.server.stop(grace)
        if self.front is not None:
            await self.front.stop()
        if self.router is not None:
            await self.router.stop()
        if self.notifications is not None:
            await self.notifications.close()
        if self.push is not None:
            await self.push.close()
        if self.nc is not None:
            await self.nc.close()
        if self.database is not None:
            await self.database.close()
        if self.nats_server is not None:
            await self.nats_server.stop()


async def run_relay(options: RelayOptions) -> int:
    relay = Relay(options)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await relay.start()
        host = options.listen.rsplit(":", 1)[0]
        tunnel_host = options.tunnel_listen.rsplit(":", 1)[0]
        print(
            f"relay {options.relay_id} listening on {host}:{relay.port}"
            f" (daemons: {tunnel_host}:{relay.tunnel_port})",
            flush=True,
        )
        await stopping.wait()
    finally:
        await relay.stop()
    return 0
