"""The web client as a capability of the daemon: bound before anything else changes, started
once gRPC serves, on the same sessions and permission bridge, with Web Push to its browsers
(composition.push). On when `daemon.http.listen` is set (the LAN) or the daemon dials a relay
(the relay's browsers, through the web gateway); then always on the gateway's private socket.
Off, a daemon loads none of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from betcode.commands.catalog import CommandCatalog, stored_init_lookup, user_claude_dir
from betcode.composition.background import BackgroundTasks
from betcode.composition.core import Core
from betcode.composition.startup_checks import DaemonStartupError
from betcode.core.session_directories import session_directories
from betcode.daemon_config import DaemonConfig
from betcode.server.app import RpcService
from betcode.server.health import ComponentReport, HealthMonitor

if TYPE_CHECKING:
    from betcode.server.web_access_service import WebAccessService
    from betcode.server.web_gateway_service import WebGatewayService
    from betcode.tunnel.client import TunnelClient
    from betcode.web.server import WebServer


def listen_web(config: DaemonConfig, *, relayed: bool) -> WebServer | None:
    """The web client's gateway socket, and its LAN address and TLS files if set, checked and
    bound (a refusal is exit 65 for TLS, 69 for an address); None when the web client is off
    (no LAN listener, and no relay: `relayed`)."""
    if not config.settings.http.listen and not relayed:
        return None
    # Imported here: a daemon without the web client does not load aiohttp.
    from betcode.web.server import WebPlaces, WebServer, WebStartError

    places = WebPlaces(config.config_dir, config.data_dir, config.web_gateway_socket)
    web = WebServer(config.settings.http, places)
    try:
        web.listen()
    except WebStartError as exc:
        raise DaemonStartupError(str(exc), exc.exit_code) from exc
    return web


async def start_web(
    web: WebServer,
    core: Core,
    health: HealthMonitor,
    config: DaemonConfig,
    tasks: BackgroundTasks,
    *,
    client_silence: Callable[[], float],
    access: WebAccessService,
    relay: TunnelClient | None = None,
) -> None:
    """`access`: the owner's sign-ins on the daemon's socket, handed the device store here;
    `relay`: the relay tunnel, which delivers the pushes of devices that reach this daemon
    through the relay and revokes the relay login of a phone paired through it."""
    # Imported here: a daemon without the web client loads nothing of Web Push.
    from betcode.composition.push import start_push
    from betcode.push.sender import RelayDelivery
    from betcode.web.commands_api import WebCommands
    from betcode.web.devices import Devices
    from betcode.web.domain import make_web_domain
    from betcode.web.token import TokenFile

    domain = make_web_domain(
        core.sessions,
        core.bridge,
        core.writer,
        core.reader,
        core.admission,
        max_payload_bytes=config.settings.max_payload_bytes,
        client_silence=client_silence,
    )
    relay_revoke = None if relay is None else relay.revoke_paired_device
    devices = Devices(TokenFile(config.config_dir), core.writer, core.reader, relay_revoke)
    await devices.load()
    access.attach(devices)
    if relay is not None:
        relay.relay_login_signed_out = devices.relay_login_signed_out
        relay.relay_login_revoked = devices.relay_login_revoked
    relay_push = (
        None
        if relay is None
        else RelayDelivery(relay.deliver_push, relay.settings.identity.machine_id())
    )
    push = start_push(
        core, config.config_dir, config.settings.web.push, tasks, devices.signed_in, relay_push
    )
    tasks.start(devices.watch_token(), name="web-token-watch")
    catalog = CommandCatalog(user_claude_dir(config.environ), stored_init_lookup(core.reader))
    commands = WebCommands(session_directories(core.sessions), catalog)
    await web.start(domain, push, devices, commands)
    if web.url is not None:
        serving = ComponentReport(True, f"serving on {web.url} (`betcode web`)")
        health.add_component("web", lambda: serving, critical=False)


def web_gateway(config: DaemonConfig) -> tuple[RpcService, WebGatewayService]:
    """WebGatewayService, on the web app's gateway socket (the daemon closes it when it stops).
    Only with the web client on: without it the service is not served (UNIMPLEMENTED)."""
    from betcode.server.web_gateway_service import WebGatewayService
    from betcode.v1 import web_gateway_pb2

    gateway = WebGatewayService(config.web_gateway_socket)
    descriptor = web_gateway_pb2.DESCRIPTOR.services_by_name["WebGatewayService"]
    return RpcService(descriptor, gateway), gateway


def web_access() -> tuple[RpcService, WebAccessService]:
    """WebAccessService, the owner's sign-ins; only with the web client on (as the gateway)."""
    from betcode.server.web_access_service import WebAccessService
    from betcode.v1 import web_access_pb2

    access = WebAccessService()
    descriptor = web_access_pb2.DESCRIPTOR.services_by_name["WebAccessService"]
    return RpcService(descriptor, access), access
