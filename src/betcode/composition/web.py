"""The web client as a capability of the daemon (`daemon.http.listen`; off while empty): bound
before anything else changes, started once gRPC serves, on the same sessions and permission
bridge, with Web Push to its browsers (composition.push)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from betcode.commands.catalog import CommandCatalog, stored_init_lookup, user_claude_dir
from betcode.composition.background import BackgroundTasks
from betcode.composition.core import Core
from betcode.composition.startup_checks import DaemonStartupError
from betcode.core.session_directories import session_directories
from betcode.daemon_config import DaemonConfig
from betcode.server.health import ComponentReport, HealthMonitor

if TYPE_CHECKING:
    from betcode.push.sender import RelayPost
    from betcode.web.server import WebServer


def listen_web(config: DaemonConfig) -> WebServer | None:
    """The web client's address and TLS files, checked and bound: a refusal is exit 65 (TLS)
    or 69 (address)."""
    http = config.settings.http
    if not http.listen:
        return None
    # Imported here: a daemon without the web client does not load aiohttp.
    from betcode.web.server import WebPlaces, WebServer, WebStartError

    web = WebServer(http, WebPlaces(config.config_dir, config.data_dir))
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
    relay_push: RelayPost | None = None,
) -> None:
    """`relay_push`: the relay tunnel's delivery of pushes (for devices that reach this daemon
    through the relay)."""
    # Imported here: a daemon without the web client loads nothing of Web Push.
    from betcode.composition.push import start_push
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
    devices = Devices(TokenFile(config.config_dir), core.writer, core.reader)
    await devices.load()
    push = start_push(
        core, config.config_dir, config.settings.web.push, tasks, devices.signed_in, relay_push
    )
    tasks.start(devices.watch_token(), name="web-token-watch")
    catalog = CommandCatalog(user_claude_dir(config.environ), stored_init_lookup(core.reader))
    commands = WebCommands(session_directories(core.sessions), catalog)
    await web.start(domain, push, devices, commands)
    serving = ComponentReport(True, f"serving on {web.url} (`betcode web`)")
    health.add_component("web", lambda: serving, critical=False)
