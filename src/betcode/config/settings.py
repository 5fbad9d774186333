"""The daemon's own settings: typed, with documented defaults and ranges, validated at load.

They live under the `daemon` key of `<config dir>/settings.json` (the rest of that file is
Claude Code's settings format, of which BetCode reads only `permissions`). Precedence, highest
first: command-line flags (`overrides`: dotted keys below `daemon`, such as
`crash_policy.max_crashes`), the environment variables in ENV_KEYS, the file, the built-in
defaults. A higher layer replaces
a key's whole value: overriding `crash_policy` with an object resets the fields it omits to
their defaults, not to the file's values.

Every value is checked when loaded; an error names the file (or flag / variable), the dotted key,
the value and what is allowed. Unknown keys under `daemon` are logged at WARN and ignored.
The ranges bound what a user may configure; code (tests, benchmarks) may construct the
dataclasses directly with other values, e.g. a 2-second watchdog.

`resolve_daemon_settings` also tells, for every leaf setting, where its value came from and what
it allows (ConfigService's GetSettings and `betcode config show` show both).
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import json
import logging
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from betcode.config.errors import ConfigError, show_value
from betcode.config.layers import SETTINGS_FILE, read_settings_file
from betcode.config.values import (
    DAY,
    HOUR,
    MIB,
    SPEC,
    Rejected,
    Spec,
    format_duration,
    setting,
)

LOG_LEVELS = ("error", "warn", "info", "debug", "trace")
ENV_KEYS = {
    "BETCODE_LOG_LEVEL": "log_level",
    "BETCODE_MAX_PAYLOAD_BYTES": "max_payload_bytes",
    "BETCODE_MAX_SESSIONS": "max_sessions",
    "BETCODE_MAX_SUBAGENTS": "subagent.max_concurrent",
    "BETCODE_SUBPROCESS_TIMEOUT": "subprocess.timeout_seconds",
}
COMMAND_LINE = "command line"
DEFAULT_ORIGIN = "default"
_PREFIX = "daemon."

log = logging.getLogger(__name__)
_T = typing.TypeVar("_T")


@dataclass(frozen=True)
class CrashPolicy:
    """Restart backoff and the crash budget of one claude process."""

    initial_backoff_ms: int = setting(500, "int", 100, 5000)
    max_backoff_ms: int = setting(30_000, "int", 1000, 300_000)
    multiplier: float = setting(2.0, "float", 1.5, 4.0)
    max_crashes: int = setting(5, "int", 1, 20)
    window_seconds: float = setting(60.0, "seconds", 30, 600)

    def __post_init__(self) -> None:
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ValueError(
                f"max_backoff_ms ({self.max_backoff_ms}) must not be below "
                f"initial_backoff_ms ({self.initial_backoff_ms})"
            )


@dataclass(frozen=True)
class SubprocessSettings:
    """`timeout_seconds`: the watchdog (no output during a turn, no permission pending).
    `idle_reap_seconds` 0 keeps idle processes forever."""

    timeout_seconds: float = setting(300.0, "seconds", 60, 7200)
    idle_reap_seconds: float = setting(600.0, "seconds", 0, DAY)
    kill_grace_seconds: float = setting(5.0, "seconds", 1, 60)
    env_allowlist_extra: tuple[str, ...] = setting((), "names")


@dataclass(frozen=True)
class PermissionSettings:
    """Pending requests wait `ttl_seconds`, renewed by activity when `extend_on_activity`.
    `notify_command` (argv, not a shell line) runs for each reminder."""

    ttl_seconds: float = setting(7 * DAY, "seconds", HOUR, 30 * DAY)
    extend_on_activity: bool = setting(True, "bool")
    reminder_seconds: tuple[float, ...] = setting((HOUR, DAY), "seconds_list", 60, 30 * DAY)
    sweep_interval_seconds: float = setting(300.0, "seconds", 10, HOUR)
    notify_command: tuple[str, ...] | None = setting(None, "argv")


@dataclass(frozen=True)
class InputLockSettings:
    transfer_seconds: float = setting(10.0, "seconds", 5, 60)
    idle_handover_seconds: float = setting(300.0, "seconds", 60, HOUR)


@dataclass(frozen=True)
class HttpSettings:
    """The web client (`betcode.web`): off while `listen` is empty. A non-loopback address
    needs TLS, so the access token never crosses a network in clear text."""

    listen: str = setting("", "text")
    tls_cert: str = setting("", "text")
    tls_key: str = setting("", "text")

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key must be given together")
        if not self.listen:
            return
        host, _port = split_host_port(self.listen)
        if not self.tls_cert and not is_loopback_host(host):
            raise ValueError(
                f"listen {self.listen!r} is not a loopback address; serving the web client "
                "beyond this machine needs TLS (--http-tls-cert and --http-tls-key), or reach "
                "it through an ssh tunnel or a private network (README: the web client)"
            )


def split_host_port(address: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) → (host, port); ValueError saying what is wrong.
    HOST is an IP address or `localhost`: a name would need DNS to tell where it binds."""
    host, separator, port_text = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not separator or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:8484)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{address!r}: the host must be an IP address or localhost") from None
    return host, int(port_text)


def is_loopback_host(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


@dataclass(frozen=True)
class SubagentSettings:
    """The subagent pool (DIGEST SAG-06/07): at most `max_concurrent` run at once, the next
    `queue_size` wait for a place (beyond that a spawn is refused); a parent session may have
    `max_per_session` subagents unfinished at once and start `spawns_per_hour` (steps of an
    orchestration count against neither); `default_max_turns` applies when
    a request names none, `timeout_seconds` is each one's wall-clock limit."""

    max_concurrent: int = setting(5, "int", 1, 20)
    queue_size: int = setting(50, "int", 0, 1000)
    max_per_session: int = setting(20, "int", 1, 100)
    spawns_per_hour: int = setting(50, "int", 1, 1000)
    default_max_turns: int = setting(50, "int", 1, 200)
    timeout_seconds: float = setting(30 * 60.0, "seconds", 60, 2 * HOUR)


@dataclass(frozen=True)
class ObservabilitySettings:
    """Both off (empty) by default: nothing is served or sent unless asked (DIGEST OBS-04)."""

    metrics_listen: str = setting("", "text")  # loopback HOST:PORT for /metrics
    otlp_endpoint: str = setting("", "text")  # else OTEL_EXPORTER_OTLP_ENDPOINT

    def __post_init__(self) -> None:
        if self.metrics_listen:
            host, _port = split_host_port(self.metrics_listen)
            if not is_loopback_host(host):
                raise ValueError(
                    f"metrics_listen {self.metrics_listen!r} is not a loopback address; the "
                    "metrics endpoint has no authentication"
                )


@dataclass(frozen=True)
class RelaySettings:
    """Dialing out to relays (docs/RELAY.md); `daemon start --relay URL` replaces `urls`."""

    urls: tuple[str, ...] = setting((), "urls")
    custom_ca_cert: str = setting("", "text")
    heartbeat_interval_seconds: float = setting(20.0, "seconds", 10, 60)
    heartbeat_timeout_seconds: float = setting(15.0, "seconds", 5, 30)


@dataclass(frozen=True)
class WorktreeSettings:
    """Worktrees (DIGEST WT-07/08): GLOBAL ones go under `base_dir` (empty: `<data dir>/
    worktrees`); a new one runs `setup_commands` when nothing else gives a setup, killed after
    `setup_timeout_secs`; a checkout must leave `min_free_bytes` free on its disk."""

    base_dir: str = setting("", "path")
    setup_commands: tuple[str, ...] = setting((), "shell_lines")
    setup_timeout_secs: float = setting(120.0, "seconds", 1, HOUR)
    min_free_bytes: int = setting(100 * MIB, "int", 0, 1024 * 1024 * MIB)


@dataclass(frozen=True)
class DaemonSettings:
    max_payload_bytes: int = setting(10 * MIB, "int", MIB, 100 * MIB)
    max_sessions: int = setting(100, "int", 1, 1000)
    client_queue_size: int = setting(1024, "int", 128, 8192)
    # DIGEST SES-14's heartbeat timeout (`daemon.client.heartbeat_timeout_seconds` there).
    client_silence_seconds: float = setting(30.0, "seconds", 10, 120)
    log_level: str = setting("info", "choice", choices=LOG_LEVELS)
    crash_policy: CrashPolicy = field(default_factory=CrashPolicy)
    subprocess: SubprocessSettings = field(default_factory=SubprocessSettings)
    permission: PermissionSettings = field(default_factory=PermissionSettings)
    input_lock: InputLockSettings = field(default_factory=InputLockSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    subagent: SubagentSettings = field(default_factory=SubagentSettings)
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    relay: RelaySettings = field(default_factory=RelaySettings)
    worktree: WorktreeSettings = field(default_factory=WorktreeSettings)


@dataclass(frozen=True, slots=True)
class SettingValue:
    key: str  # dotted, from the top of settings.json: "daemon.permission.ttl_seconds"
    value: object
    # DEFAULT_ORIGIN, the settings file's path, "environment variable NAME" or COMMAND_LINE
    origin: str
    allowed: str  # what the setting accepts, e.g. "allowed 1h to 30d"


@dataclass(frozen=True, slots=True)
class ResolvedSettings:
    settings: DaemonSettings
    values: tuple[SettingValue, ...]  # every leaf setting, in declaration order

    def value(self, key: str) -> SettingValue:
        return next(v for v in self.values if v.key == key)


def load_daemon_settings(
    config_dir: Path,
    overrides: Mapping[str, object] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> DaemonSettings:
    """Settings from `<config dir>/settings.json`, the environment and flags (module doc)."""
    return _load(config_dir, overrides, environ)[0]


def resolve_daemon_settings(
    config_dir: Path,
    overrides: Mapping[str, object] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ResolvedSettings:
    """The settings `load_daemon_settings` gives, each leaf with its origin and allowed values."""
    settings, origins = _load(config_dir, overrides, environ)
    values = tuple(
        SettingValue(key, value, origins.of(key.removeprefix(_PREFIX)), spec_of(key).allowed_text())
        for key, value in settings_items(settings)
    )
    return ResolvedSettings(settings, values)


def _load(
    config_dir: Path, overrides: Mapping[str, object] | None, environ: Mapping[str, str] | None
) -> tuple[DaemonSettings, _Origins]:
    path = config_dir / SETTINGS_FILE
    data = read_settings_file(path) or {}
    section = data.get("daemon", {})
    if not isinstance(section, Mapping):
        raise ConfigError(str(path), "daemon", f"must be an object, got {show_value(section)}")
    values = copy.deepcopy(dict(section))
    origins = _Origins(str(path), section)
    _read_top_level_worktree(data, values, origins)
    env = os.environ if environ is None else environ
    for name, key in ENV_KEYS.items():
        if env.get(name):
            _set(values, key, _text_value(env[name]))
            origins.set(key, f"environment variable {name}")
    for key, value in (overrides or {}).items():
        _set(values, key, value)
        origins.set(key, COMMAND_LINE)
    return _build(DaemonSettings, values, "", origins), origins


def _read_top_level_worktree(
    data: Mapping[str, object], values: dict[str, object], origins: _Origins
) -> None:
    """DIGEST CFG-08 places the worktree settings in a top-level `worktree` section: it is read
    as `daemon.worktree` unless that exists, which then wins whole."""
    if "worktree" not in data:
        return
    if "worktree" in values:
        log.warning("%s: top-level worktree ignored; daemon.worktree is used", origins.file)
        return
    values["worktree"] = copy.deepcopy(data["worktree"])
    origins.set("worktree", f"{origins.file} (top-level worktree)")


def settings_items(settings: object, prefix: str = "daemon") -> list[tuple[str, object]]:
    """(dotted key, value) for every leaf setting, in declaration order."""
    items: list[tuple[str, object]] = []
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        key = f"{prefix}.{f.name}"
        if dataclasses.is_dataclass(value):
            items.extend(settings_items(value, key))
        else:
            items.append((key, value))
    return items


KNOWN_KEYS = frozenset(key for key, _ in settings_items(DaemonSettings()))


def spec_of(key: str) -> Spec:
    """The load-time check of the setting at dotted `key` (one of KNOWN_KEYS)."""
    cls: type = DaemonSettings
    *parents, leaf = key.removeprefix(_PREFIX).split(".")
    for name in parents:
        cls = typing.get_type_hints(cls)[name]
    spec: Spec = next(f for f in dataclasses.fields(cls) if f.name == leaf).metadata[SPEC]
    return spec


def display_value(key: str, value: object) -> str:
    """A setting's value for people (`config show`, the reload log): durations spelled like
    "10m", everything else as JSON."""
    kind = spec_of(key).kind
    if kind == "seconds" and isinstance(value, int | float):
        return format_duration(value)
    if kind == "seconds_list" and isinstance(value, list | tuple):
        return ", ".join(format_duration(seconds) for seconds in value)
    return show_value(value)


class _Origins:
    """Where each value came from: the last layer that set the key or a section holding it (the
    environment, then flags), else the file if it has the key, else the default."""

    def __init__(self, file: str, section: Mapping[str, object]) -> None:
        self.file = file
        self._section = section
        self._by_key: dict[str, str] = {}

    def set(self, key: str, origin: str) -> None:
        """A layer set dotted `key`; it replaces that whole value, so nothing below it keeps the
        origin of a lower layer."""
        for below in [k for k in self._by_key if k.startswith(key + ".")]:
            del self._by_key[below]
        self._by_key[key] = origin

    def of(self, key: str) -> str:
        """Where the value at dotted `key` (relative to `daemon`) came from. For a section, a
        layer that set a key inside it is named (its error may come from that key)."""
        parts = key.split(".")
        for end in range(len(parts), 0, -1):
            origin = self._by_key.get(".".join(parts[:end]))
            if origin is not None:
                return origin
        inside = [o for k, o in self._by_key.items() if k.startswith(key + ".")]
        if inside:
            return inside[-1]
        node: object = self._section
        for part in parts:
            if not isinstance(node, Mapping) or part not in node:
                return DEFAULT_ORIGIN
            node = node[part]
        return self.file


def parse_override(text: str) -> tuple[str, object]:
    """A `--set KEY=VALUE` flag: KEY a dotted daemon setting (a leading `daemon.` is optional),
    VALUE JSON when it parses as JSON (numbers, booleans, lists), else text."""
    key, separator, raw = text.partition("=")
    key = key.strip().removeprefix("daemon.")
    if not separator or not key:
        example = "crash_policy.max_crashes=3"
        raise ConfigError(COMMAND_LINE, None, f"--set {text!r}: expected KEY=VALUE, e.g. {example}")
    leaves = {name.removeprefix("daemon.") for name, _ in settings_items(DaemonSettings())}
    # A whole section may be set too, as a JSON object: `crash_policy={"max_crashes": 3}`.
    sections = {f.name for f in dataclasses.fields(DaemonSettings)}
    if key not in leaves | sections:
        problem = "is not a daemon setting (`betcode config show` lists them)"
        raise ConfigError(COMMAND_LINE, f"daemon.{key}", problem)
    return key, _text_value(raw)


def _text_value(raw: str) -> object:
    """Environment and flag values are JSON when they parse as JSON (numbers, booleans), else
    text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _set(values: dict[str, object], dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    node = values
    for name in parents:
        child = node.get(name)
        if not isinstance(child, dict):
            child = {}
            node[name] = child
        node = child
    node[leaf] = value


def _build(cls: type[_T], data: Mapping[str, object], prefix: str, origins: _Origins) -> _T:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, object] = {}
    known: set[str] = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        known.add(f.name)
        if f.name not in data:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        value = data[f.name]
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            if not isinstance(value, Mapping):
                problem = f"must be an object, got {show_value(value)}"
                raise ConfigError(origins.of(key), f"daemon.{key}", problem)
            kwargs[f.name] = _build(kind, value, key, origins)
            continue
        spec: Spec = f.metadata[SPEC]
        try:
            kwargs[f.name] = spec.convert(value)
        except Rejected as rejected:
            problem = f"{show_value(value)} {rejected}"
            raise ConfigError(origins.of(key), f"daemon.{key}", problem) from None
    for unknown in sorted(set(data) - known):
        key = f"{prefix}.{unknown}" if prefix else unknown
        log.warning("%s: unknown setting daemon.%s ignored", origins.of(key), key)
    try:
        return cls(**kwargs)
    except ValueError as error:
        raise ConfigError(origins.of(prefix), f"daemon.{prefix}".rstrip("."), str(error)) from None
