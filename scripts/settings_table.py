"""Prints the daemon settings table of docs/SETTINGS.md (Markdown), made from the code.

Keys, defaults and allowed values come from `betcode.config.settings`, environment variables
from `betcode.config.resolve`, "on reload" from `betcode.daemon_config.takes_effect`; only the
"what" column is written here, and every setting must have one (a new setting without a
description fails, and so does the test that docs/SETTINGS.md is this script's output).

Usage: .venv/bin/python scripts/settings_table.py
"""

from __future__ import annotations

import dataclasses

from betcode.config.resolve import ENV_KEYS
from betcode.config.settings import DaemonSettings
from betcode.config.values import SPEC, Spec, format_duration
from betcode.daemon_config import takes_effect

WHAT = {
    "max_payload_bytes": "longest stdout line of claude kept whole; a longer one is cut to "
    "valid JSON marked `[truncated: original_size=N bytes]`",
    "max_sessions": "sessions in use at once (with a claude process or an attached client); "
    "one more create is refused with POOL_EXHAUSTED",
    "client_queue_size": "events queued per client; a client that falls further behind is "
    "dropped to catching up from SQLite",
    "client_silence_seconds": "a Converse client that has sent heartbeats and then nothing "
    "for this long is dropped (CLIENT_SILENT) and its input lock passed on",
    "log_level": "daemon log level (`trace` adds every raw NDJSON line of claude)",
    "crash_policy.initial_backoff_ms": "delay before the first restart of a crashed claude",
    "crash_policy.max_backoff_ms": "longest restart delay (not below the initial one)",
    "crash_policy.multiplier": "restart delay growth per crash",
    "crash_policy.max_crashes": "crashes within `window_seconds` that leave the session CRASHED",
    "crash_policy.window_seconds": "the window crashes are counted in",
    "subprocess.timeout_seconds": "watchdog: a turn with no output and no pending permission "
    "for this long kills claude (then restart with `--resume`)",
    "subprocess.idle_reap_seconds": "stop a claude process idle this long (`0`: never); the "
    "next message starts it again with `--resume`",
    "relay.allow_unencrypted": "take relayed calls that are not end-to-end encrypted (older "
    "or other clients); the relay can then read and make them, and each is logged as a "
    "warning",
    "relay.urls": "relays to dial out to (the daemon port of each, tried in turn); needs "
    "`betcode machine register` first",
    "relay.custom_ca_cert": "the relays' CA certificate (PEM file; default: the one stored "
    "by `machine register`)",
    "relay.heartbeat_interval_seconds": "tunnel heartbeat to the relay (TOP-04)",
    "relay.heartbeat_timeout_seconds": "a heartbeat unanswered this long ends the tunnel; "
    "the daemon reconnects",
    "observability.metrics_listen": "serve Prometheus metrics at `http://HOST:PORT/metrics` "
    "(loopback only; `daemon start --metrics`); empty: off",
    "observability.otlp_endpoint": "send OpenTelemetry traces to this OTLP endpoint (else "
    "`OTEL_EXPORTER_OTLP_ENDPOINT`); empty and no variable: no traces",
    "subprocess.kill_grace_seconds": "SIGTERM to SIGKILL grace when stopping claude",
    "subprocess.env_allowlist_extra": "more environment variables passed to claude (names, or "
    "`PREFIX_*`)",
    "holder.spool_limit_bytes": "claude output a holder keeps that the daemon has not committed "
    "(while no daemon is attached, or one falls behind); then claude waits in its write, "
    "nothing is dropped. At least twice `max_payload_bytes`",
    "holder.unattended_seconds": "with no daemon attached this long, a holder ends claude "
    "(SIGTERM) and keeps its output and exit status for the next daemon, which ingests them "
    "(`0`: never)",
    "permission.ttl_seconds": "how long an unanswered permission request waits before it is denied",
    "permission.extend_on_activity": "client activity in the session (a message, an attach, an "
    "answer) pushes the expiry of its pending requests back to one TTL from then",
    "permission.reminder_seconds": "waiting times at which a reminder is sent (the first two "
    "are used)",
    "permission.sweep_interval_seconds": "how often reminders and expiry are checked",
    "permission.notify_command": "command run for each reminder (argv, not a shell line; the "
    "request is in `BETCODE_PERMISSION_*` variables)",
    "input_lock.transfer_seconds": "a client asks for the input lock: the holder keeps it by "
    "sending input within this time, else it moves",
    "input_lock.idle_handover_seconds": "a holder idle this long loses the lock to a waiting "
    "client",
    "http.listen": "serve the web client on `HOST:PORT` (`betcode daemon start --http`); empty: "
    "off. Beyond loopback only with `tls_cert` and `tls_key`",
    "http.tls_cert": "TLS certificate (PEM file) for the web client (`--http-tls-cert`)",
    "http.tls_key": "TLS private key (PEM file) for the web client (`--http-tls-key`)",
    "web.push.allow_loopback_endpoints": "also accept Web Push subscriptions whose push "
    "service is `http://127.0.0.1:PORT` (tests, a push service on this machine); else https "
    "only",
    "web.push.contact": "the VAPID `sub` every Web Push is signed with: a `mailto:` address "
    "or `https:` URL where a push service's operator can reach whoever runs this daemon",
    "subagent.max_concurrent": "subagents running at once; more wait in the queue",
    "subagent.queue_size": "subagents waiting for a place; one more spawn is refused with "
    "POOL_EXHAUSTED",
    "subagent.max_per_session": "subagents of one parent session running or waiting at once, "
    "orchestration steps aside (SUBAGENT_LIMIT beyond)",
    "subagent.spawns_per_hour": "spawns per parent session per hour (RATE_LIMITED beyond)",
    "subagent.default_max_turns": "model calls per turn of a subagent that names no max_turns",
    "subagent.timeout_seconds": "wall-clock limit of one subagent (then SIGTERM, failed)",
    "worktree.base_dir": "where GLOBAL repositories' worktrees go: `<base_dir>/<repo name>/"
    "<worktree name>`; empty: `<data dir>/worktrees`",
    "worktree.setup_commands": "run in order in a new worktree when neither the request, the "
    "repository nor a checked-in `.betcode/worktree-setup.sh` gives a setup",
    "worktree.setup_timeout_secs": "the whole setup's time limit; then its process group is "
    "killed and `setup_status` is `timeout`",
    "worktree.min_free_bytes": "free disk space a new checkout must leave (RESOURCE_EXHAUSTED "
    "otherwise, with `required_bytes` and `available_bytes`)",
    "limits.session_cost_usd": "a session that has spent this much (USD, as claude reports it) "
    "asks before its next turn (docs/LIMITS.md); 0: no cap",
    "limits.daily_cost_usd": "once all sessions together have spent this much on a local day, "
    "each session asks before its next turn; 0: no cap",
    "limits.max_running_turns": "turns running at once across sessions; more messages wait in "
    "a queue, in order; 0: no cap",
    "limits.session_rss_mb": "an idle session's claude (its process tree) above this is stopped, "
    "resumed by the next message; a running one is flagged; 0: no cap",
    "grpc.server": "the gRPC server: `betcode` (its own HTTP/2 transport) or `grpcio` "
    "(grpc.aio's server, a fallback that takes of these limits only `max_concurrent_streams` "
    "and `idle_timeout_seconds`); docs/TRANSPORT.md",
    "grpc.max_connections": "client connections open at once (Unix socket and TCP together); "
    "one more is sent GOAWAY (ENHANCE_YOUR_CALM) and closed",
    "grpc.max_concurrent_streams": "calls open at once on one connection (announced in "
    "SETTINGS); a stream over it is refused alone (REFUSED_STREAM)",
    "grpc.connection_buffer_bytes": "request bytes one connection may have buffered, whole "
    "messages not yet read and partial ones of all its calls together; beyond: GOAWAY",
    "grpc.write_high_water_bytes": "unsent output of one connection (responses, PING and "
    "SETTINGS acknowledgements) at which the daemon stops reading from it",
    "grpc.write_low_water_bytes": "unsent output below which reading resumes (below the high "
    "water mark)",
    "grpc.budget_window_seconds": "the time window the three budgets below are counted in",
    "grpc.max_resets_per_window": "streams a connection's client resets (or opens over the "
    "limit) per window; beyond: GOAWAY (ENHANCE_YOUR_CALM), e.g. rapid reset",
    "grpc.max_pings_per_window": "PINGs per window from one connection's client; beyond: GOAWAY "
    "(ENHANCE_YOUR_CALM)",
    "grpc.max_settings_per_window": "SETTINGS frames per window from one connection's client; "
    "beyond: GOAWAY (ENHANCE_YOUR_CALM)",
    "grpc.idle_timeout_seconds": "a connection with no call open this long is closed (GOAWAY, "
    "NO_ERROR; clients reconnect when needed); `0`: never",
    "grpc.frame_timeout_seconds": "a connection's preface, and each frame or header block it "
    "begins, must be complete within this; else it is closed",
}


def allowed(spec: Spec) -> str:
    """What a value may be, in the words a user types."""
    if spec.kind == "int":
        return f"{int(spec.low or 0):,} to {int(spec.high or 0):,}"
    if spec.kind == "float":
        return f"{spec.low:g} to {spec.high:g}"
    if spec.kind == "seconds":
        return f"{format_duration(spec.low or 0)} to {format_duration(spec.high or 0)}"
    if spec.kind == "seconds_list":
        low, high = format_duration(spec.low or 0), format_duration(spec.high or 0)
        return f"list, each {low} to {high}, increasing"
    if spec.kind == "choice":
        return ", ".join(spec.choices)
    return {
        "bool": "true, false",
        "names": "list of names",
        "argv": "string or list, or null",
        "text": "string",
        "urls": "list of URLs",
        "path": "absolute path, or empty",
        "shell_lines": "list of shell lines",
    }[spec.kind]


def shown(value: object, spec: Spec) -> str:
    """A default as it would be written in settings.json."""
    if spec.kind == "seconds":
        return f'"{format_duration(float(value))}"'  # type: ignore[arg-type]
    if spec.kind == "seconds_list":
        return "[" + ", ".join(f'"{format_duration(v)}"' for v in value) + "]"  # type: ignore[attr-defined]
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[]" if not value else str(list(value))
    if isinstance(value, str):
        return f'"{value}"'
    return str(value) if isinstance(value, int) else f"{value:g}"  # type: ignore[str-format]


def rows(settings: object, prefix: str = "") -> list[tuple[str, object, Spec]]:
    """(dotted key below `daemon`, default, spec) for every leaf setting, in declaration order."""
    found: list[tuple[str, object, Spec]] = []
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            found.extend(rows(value, f"{key}."))
        else:
            found.append((key, value, f.metadata[SPEC]))
    return found


def table() -> str:
    settings = rows(DaemonSettings())
    keys = {key for key, _, _ in settings}
    if keys != set(WHAT):
        missing, stale = sorted(keys - set(WHAT)), sorted(set(WHAT) - keys)
        raise SystemExit(f"settings_table.py WHAT: missing {missing}, not settings {stale}")
    env_of = {key: name for name, key in ENV_KEYS.items()}
    lines = [
        "| `daemon.` key | default | allowed | env | what | on reload |",
        "|---|---|---|---|---|---|",
    ]
    for key, default, spec in settings:
        env = f"`{env_of[key]}`" if key in env_of else ""
        when = takes_effect(f"daemon.{key}")
        cells = [f"`{key}`", f"`{shown(default, spec)}`", allowed(spec), env, WHAT[key], when]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
