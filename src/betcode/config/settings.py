"""What the daemon settings are: every key under `daemon` in `<config dir>/settings.json`, with
its default and the range a user may configure (`setting(default, kind, low, high)`).

They are resolved from the file, the environment and flags by `config.resolve`, which checks
the ranges at load: the ranges bound what a user may configure, while code (tests, benchmarks)
may construct these dataclasses directly with other values, e.g. a 2-second watchdog. The
`__post_init__` checks (fields that go together, addresses) hold for any construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from betcode.config.addresses import is_loopback_host, split_host_port
from betcode.config.values import DAY, HOUR, MIB, setting

LOG_LEVELS = ("error", "warn", "info", "debug", "trace")
GRPC_SERVERS = ("betcode", "grpcio")
KIB = 1024


class SettingConflict(ValueError):
    """A setting's value does not go with another's; `key` (dotted, within the section that
    raised it) is the one the message is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


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
class HolderSettings:
    """The holder each claude runs under (claude/holder): it keeps at most `spool_limit_bytes`
    of claude's output that the daemon has not committed (then claude waits in its write), and
    after `unattended_seconds` with no daemon attached (0: never) it ends claude and keeps that
    output, with claude's exit status, for the next daemon."""

    spool_limit_bytes: int = setting(64 * MIB, "int", 2 * MIB, 16 * 1024 * MIB)
    unattended_seconds: float = setting(7 * DAY, "seconds", 0, 365 * DAY)


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
                "it through an ssh tunnel or a private network (docs/USAGE.md, the web client)"
            )


def check_push_contact(contact: str) -> None:
    """A `mailto:` address or an `https:` URL (RFC 8292 asks for one of them)."""
    scheme, _, rest = contact.partition(":")
    if scheme == "mailto" and "@" in rest.strip("@") and not any(c.isspace() for c in rest):
        return
    url = urlsplit(contact)
    if url.scheme == "https" and url.hostname and not any(c.isspace() for c in contact):
        return
    raise SettingConflict(
        "contact",
        f"{contact!r} must be a mailto: address (mailto:you@example.com) or an https: "
        "URL, for push services' operators to reach you",
    )


@dataclass(frozen=True)
class WebPushSettings:
    """Web Push to the web client's browsers (betcode.push): a push service's endpoint must be
    https; `allow_loopback_endpoints` also admits `http://127.0.0.1:PORT` ones (tests, a push
    service run on this machine). `contact` is the VAPID `sub` every push is signed with: how a
    push service's operator reaches whoever runs this daemon, a `mailto:` or `https:` URL."""

    allow_loopback_endpoints: bool = setting(False, "bool")
    contact: str = setting("mailto:betcode@localhost", "text")

    def __post_init__(self) -> None:
        check_push_contact(self.contact)


@dataclass(frozen=True)
class WebSettings:
    push: WebPushSettings = field(default_factory=WebPushSettings)


@dataclass(frozen=True)
class SubagentSettings:
    """The subagent pool: at most `max_concurrent` run at once, the next
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
    """Both off (empty) by default: nothing is served or sent unless asked."""

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
    allow_unencrypted: bool = setting(False, "bool")


@dataclass(frozen=True)
class WorktreeSettings:
    """Worktrees: GLOBAL ones go under `base_dir` (empty: `<data dir>/
    worktrees`); a new one runs `setup_commands` when nothing else gives a setup, killed after
    `setup_timeout_secs`; a checkout must leave `min_free_bytes` free on its disk."""

    base_dir: str = setting("", "path")
    setup_commands: tuple[str, ...] = setting((), "shell_lines")
    setup_timeout_secs: float = setting(120.0, "seconds", 1, HOUR)
    min_free_bytes: int = setting(100 * MIB, "int", 0, 1024 * 1024 * MIB)


@dataclass(frozen=True)
class LimitSettings:
    """Caps on what many agents spend and use (docs/LIMITS.md); 0 means no cap. A session at a
    cost cap asks before its next turn starts; turns beyond `max_running_turns` wait in a
    queue; an idle session's claude above `session_rss_mb` is stopped (resumed on the next
    message)."""

    session_cost_usd: float = setting(0.0, "float", 0, 100_000)
    daily_cost_usd: float = setting(0.0, "float", 0, 100_000)
    max_running_turns: int = setting(0, "int", 0, 1000)
    session_rss_mb: int = setting(0, "int", 0, 1024 * 1024)


@dataclass(frozen=True)
class GrpcSettings:
    """The daemon's gRPC server (docs/TRANSPORT.md): `server` picks BetCode's own HTTP/2
    transport or grpcio's; the limits bound what one client can make the daemon hold or do,
    each per connection except `max_connections`. A budget counts frames per
    `budget_window_seconds`; a client over it is sent GOAWAY (ENHANCE_YOUR_CALM). grpcio's
    server takes `max_concurrent_streams` and `idle_timeout_seconds`; for the rest it has
    limits of its own."""

    server: str = setting("betcode", "choice", choices=GRPC_SERVERS)
    max_connections: int = setting(256, "int", 1, 100_000)
    max_concurrent_streams: int = setting(1000, "int", 1, 100_000)
    connection_buffer_bytes: int = setting(64 * MIB, "int", 32 * MIB, 4096 * MIB)
    write_high_water_bytes: int = setting(64 * KIB, "int", 16 * KIB, 64 * MIB)
    write_low_water_bytes: int = setting(16 * KIB, "int", 0, 64 * MIB)
    budget_window_seconds: float = setting(10.0, "seconds", 1, 600)
    max_resets_per_window: int = setting(1000, "int", 10, 1_000_000)
    max_pings_per_window: int = setting(100, "int", 10, 1_000_000)
    max_settings_per_window: int = setting(100, "int", 10, 1_000_000)
    idle_timeout_seconds: float = setting(300.0, "seconds", 0, DAY)
    frame_timeout_seconds: float = setting(10.0, "seconds", 1, 300)

    def __post_init__(self) -> None:
        if self.write_low_water_bytes >= self.write_high_water_bytes:
            raise SettingConflict(
                "write_low_water_bytes",
                f"{self.write_low_water_bytes} must be below write_high_water_bytes "
                f"({self.write_high_water_bytes})",
            )


@dataclass(frozen=True)
class DaemonSettings:
    max_payload_bytes: int = setting(10 * MIB, "int", MIB, 100 * MIB)
    max_sessions: int = setting(100, "int", 1, 1000)
    client_queue_size: int = setting(1024, "int", 128, 8192)
    # The silence timeout of docs/GRPC.md#silent-clients.
    client_silence_seconds: float = setting(30.0, "seconds", 10, 120)
    log_level: str = setting("info", "choice", choices=LOG_LEVELS)
    crash_policy: CrashPolicy = field(default_factory=CrashPolicy)
    subprocess: SubprocessSettings = field(default_factory=SubprocessSettings)
    holder: HolderSettings = field(default_factory=HolderSettings)
    permission: PermissionSettings = field(default_factory=PermissionSettings)
    input_lock: InputLockSettings = field(default_factory=InputLockSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    web: WebSettings = field(default_factory=WebSettings)
    subagent: SubagentSettings = field(default_factory=SubagentSettings)
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    relay: RelaySettings = field(default_factory=RelaySettings)
    worktree: WorktreeSettings = field(default_factory=WorktreeSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)

    def __post_init__(self) -> None:
        # A line is committed (and its spool space freed) only once it is whole: the spool
        # must hold the longest line kept whole with room to spare, or claude would wait for
        # ever in the middle of one.
        if self.holder.spool_limit_bytes < 2 * self.max_payload_bytes:
            raise SettingConflict(
                "holder.spool_limit_bytes",
                f"{self.holder.spool_limit_bytes} must be at least twice max_payload_bytes "
                f"({self.max_payload_bytes})",
            )
