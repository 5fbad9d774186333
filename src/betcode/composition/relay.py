"""The relay tunnel as a capability of the daemon (`daemon start --relay URL`, or
`daemon.relay.urls`): checked before anything is claimed, told of every session for the
attention notifications, dialled once the daemon serves. Relayed calls come in through the
daemon's own socket, so they take the local clients' code paths."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from betcode.composition.background import BackgroundTasks
from betcode.composition.core import SessionWatcher
from betcode.composition.startup_checks import DaemonStartupError
from betcode.daemon_config import EXIT_CONFIG_INVALID, DaemonConfig
from betcode.server.health import ComponentReport, HealthMonitor

if TYPE_CHECKING:
    from betcode.tunnel.client import TunnelClient


def relay_tunnel(config: DaemonConfig) -> TunnelClient | None:
    """The tunnel to the relays, if any (needs `machine register` first: exit 65 without)."""
    relay = config.settings.relay
    urls = config.relay_urls or relay.urls
    if not urls:
        return None
    # Imported only for a daemon that dials out (the tunnel brings its crypto and gRPC client).
    from betcode.remote.e2e import DaemonIdentity
    from betcode.sessions.attention import AttentionLog
    from betcode.tunnel.client import TunnelClient, TunnelSettings
    from betcode.tunnel.identity import MachineIdentity, NoMachineIdentity

    identity = MachineIdentity(config.config_dir / "certs")
    try:
        identity.require()
    except NoMachineIdentity as exc:
        raise DaemonStartupError(str(exc), EXIT_CONFIG_INVALID) from exc
    return TunnelClient(
        TunnelSettings(
            relay_urls=urls,
            identity=identity,
            local_target=f"unix:{config.socket_path}",
            ca_file=config.relay_ca_file
            or (Path(relay.custom_ca_cert) if relay.custom_ca_cert else None),
            heartbeat_interval=relay.heartbeat_interval_seconds,
            heartbeat_timeout=relay.heartbeat_timeout_seconds,
            e2e=DaemonIdentity.load_or_create(identity.e2e_key_file, identity.e2e_replay_file),
            allow_unencrypted=relay.allow_unencrypted,
            attention=AttentionLog(),
        )
    )


def attention_watchers(tunnel: TunnelClient | None) -> list[SessionWatcher]:
    """What sees each session come alive, so the relay hears of its turn ends and lock."""
    if tunnel is None or tunnel.settings.attention is None:
        return []
    return [tunnel.settings.attention.watch]


def add_tunnel_component(health: HealthMonitor, tunnel: TunnelClient | None) -> None:
    """`relay_tunnel` in the daemon's health (`daemon status`, `doctor`): the relay it is
    connected to and since when, or the last error while it is not."""
    if tunnel is None:
        return

    def check() -> ComponentReport:
        if tunnel.connected_since is not None:
            since = datetime.datetime.fromtimestamp(tunnel.connected_since, datetime.UTC)
            return ComponentReport(
                True,
                f"connected to {tunnel.relay_url} (relay {tunnel.relay_id}) since "
                f"{since.isoformat(timespec='seconds')}",
            )
        urls = ", ".join(tunnel.settings.relay_urls)
        return ComponentReport(
            True,
            f"not connected to {urls}; last error: {tunnel.last_error or 'none yet'}",
            degraded_reason="relay_tunnel_down",
        )

    health.add_component("relay_tunnel", check, critical=False)


def dial_relays(tunnel: TunnelClient | None, tasks: BackgroundTasks) -> None:
    if tunnel is not None:
        tasks.start(tunnel.run(), name="relay-tunnel")
