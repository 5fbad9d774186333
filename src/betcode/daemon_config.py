"""What the daemon runs with (`DaemonConfig`), made from the daemon settings once at start and
again at every reload: settings files + environment + the start's `--set` flags, validated by
`config.resolve`, then mapped onto what each part takes (the supervisor policy, session and
permission settings, the child environment allowlist).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HolderPlace
from betcode.config.dirs import config_dir
from betcode.config.keys import most_specific, settings_items
from betcode.config.layers import SETTINGS_FILE, PermissionLists
from betcode.config.resolve import load_daemon_settings
from betcode.config.settings import DaemonSettings, PermissionSettings
from betcode.observability.logs import TRACE
from betcode.sessions.context import SessionSettings

EXIT_CONFIG_INVALID = 65  # sysexits EX_DATAERR: a settings value is not allowed (78 is claude's)
PYTHON_LOG_LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE,  # every raw NDJSON line of claude, below DEBUG
}
# When a reloaded setting takes effect; the longest matching key prefix wins.
TAKES_EFFECT = {
    "daemon": "after a daemon restart",
    "daemon.log_level": "applied",
    "daemon.max_payload_bytes": "for claude processes started from now on",
    "daemon.max_sessions": "for sessions created from now on",
    "daemon.client_queue_size": "for clients attaching from now on",
    "daemon.client_silence_seconds": "for streams opened from now on",
    "daemon.crash_policy": "for restarts from now on",
    "daemon.crash_policy.max_crashes": "for sessions opened from now on",
    "daemon.crash_policy.window_seconds": "for sessions opened from now on",
    "daemon.subprocess": "applied",
    "daemon.subprocess.env_allowlist_extra": "for claude processes started from now on",
    "daemon.holder": "for claude processes started from now on",
    "daemon.input_lock": "applied",
    "daemon.permission": "from the next sweep",
    "daemon.permission.ttl_seconds": "for requests from now on and on activity",
    "daemon.permission.extend_on_activity": "applied",
    "daemon.subagent": "for subagents spawned from now on",
    "daemon.subagent.max_concurrent": "applied (a larger pool starts queued subagents)",
    "daemon.worktree": "for worktrees created from now on",
    "daemon.limits": "for messages from now on",
    "daemon.limits.session_rss_mb": "from the next check (every 10 s)",
}


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Everything the daemon needs, resolved once (config files + flags) and passed down."""

    data_dir: Path
    socket_path: Path
    listen: str | None = None
    claude_bin: str | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    policy: SupervisorPolicy = field(default_factory=SupervisorPolicy)
    sessions: SessionSettings = field(default_factory=SessionSettings)
    config_dir: Path = field(default_factory=config_dir)
    permissions: PermissionSettings = field(default_factory=PermissionSettings)
    env_allow: tuple[str, ...] = ()
    # What policy/sessions/permissions/env_allow were mapped from (a reload compares against
    # it), and the start's flags, which win again at every reload.
    settings: DaemonSettings = field(default_factory=DaemonSettings)
    settings_overrides: Mapping[str, object] = field(default_factory=dict)
    # The start's --allow/--deny/--ask: the highest permission layer, above every settings file.
    rules: PermissionLists = field(default_factory=PermissionLists)
    # `daemon start --relay URL...`: dial out to these relays (tunnel/client.py).
    relay_urls: tuple[str, ...] = ()
    relay_ca_file: Path | None = None

    @property
    def settings_file(self) -> Path:
        return self.config_dir / SETTINGS_FILE

    @property
    def database_path(self) -> Path:
        return self.data_dir / "daemon.db"

    @property
    def web_gateway_socket(self) -> Path:
        """Where the web gateway reaches the daemon's web app: beside the daemon's socket, so
        under its lock and in its private directory."""
        return self.socket_path.with_name(f"{self.socket_path.name}.web")

    @property
    def holders(self) -> HolderPlace:
        """Where claude's holders live and their limits (`daemon.holder`)."""
        holder = self.settings.holder
        return HolderPlace(
            self.data_dir / "holders",
            holder.spool_limit_bytes,
            holder.unattended_seconds,
            self.settings.subprocess.kill_grace_seconds,
        )


def load_daemon_config(
    *,
    data_dir: Path,
    socket_path: Path,
    config_dir: Path,
    environ: Mapping[str, str],
    listen: str | None = None,
    claude_bin: str | None = None,
    overrides: Mapping[str, object] | None = None,
    rules: PermissionLists | None = None,
) -> DaemonConfig:
    """The daemon's configuration from its settings file, the environment and the flags
    (`overrides`: dotted keys below `daemon`). Raises ConfigError naming file, key and value."""
    base = DaemonConfig(
        data_dir=data_dir,
        socket_path=socket_path,
        listen=listen,
        claude_bin=claude_bin,
        environ=dict(environ),
        config_dir=config_dir,
        settings_overrides=dict(overrides or {}),
        rules=rules or PermissionLists(),
    )
    return with_settings(base, read_settings(base))


def read_settings(config: DaemonConfig) -> DaemonSettings:
    """The daemon settings as the files, the environment and `config`'s flags say now."""
    return load_daemon_settings(
        config.config_dir, config.settings_overrides, environ=config.environ
    )


def with_settings(config: DaemonConfig, settings: DaemonSettings) -> DaemonConfig:
    """`config` with `settings` mapped onto what the daemon's parts take (ms become seconds;
    an idle reap time of 0 disables reaping)."""
    crash, child, lock = settings.crash_policy, settings.subprocess, settings.input_lock
    policy = SupervisorPolicy(
        backoff_initial=crash.initial_backoff_ms / 1000,
        backoff_max=crash.max_backoff_ms / 1000,
        backoff_multiplier=crash.multiplier,
        max_crashes=crash.max_crashes,
        window_seconds=crash.window_seconds,
        watchdog_seconds=child.timeout_seconds,
        kill_grace_seconds=child.kill_grace_seconds,
        idle_reap_seconds=child.idle_reap_seconds or None,
        max_line_bytes=settings.max_payload_bytes,
    )
    sessions = SessionSettings(
        client_queue_size=settings.client_queue_size,
        lock_transfer_seconds=lock.transfer_seconds,
        lock_idle_seconds=lock.idle_handover_seconds,
    )
    return replace(
        config,
        policy=policy,
        sessions=sessions,
        permissions=settings.permission,
        env_allow=child.env_allowlist_extra,
        settings=settings,
    )


def settings_changes(
    before: DaemonSettings, after: DaemonSettings
) -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) of every setting that differs."""
    return [
        (key, old, new)
        for (key, old), (_, new) in zip(settings_items(before), settings_items(after), strict=True)
        if old != new
    ]


def takes_effect(key: str) -> str:
    return most_specific(TAKES_EFFECT, key) or TAKES_EFFECT["daemon"]
