"""The Prometheus metrics fed by the domain's reports, and their endpoint.

Counters and histograms follow the `Observer` reports; gauges are read when scraped from the
daemon's live state (`LiveState`). Labels stay bounded: no session ids, tool names capped at
`MAX_TOOL_LABELS` distinct values (the rest count as "other"), exit codes as numbers.
The endpoint (`serve_metrics`) is prometheus_client's own HTTP server on a thread, bound to
a loopback address only; it is off unless `--metrics` / `daemon.observability.metrics_listen`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_wsgi_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from betcode.observability.hooks import Observer, TurnReport
from betcode.observability.live_state import LimitsReading, LiveState

MAX_TOOL_LABELS = 50
# Turns take seconds to minutes; a permission may wait days.
TURN_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))
WAIT_BUCKETS = (0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 6 * 3600, 86400, 7 * 86400, float("inf"))
SPAWN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))
SPEND_BUCKETS = (0.01, 0.1, 1, 10, 100, 1000)
RSS_BUCKETS = tuple(float(mb * 1024 * 1024) for mb in (128, 256, 512, 1024, 2048, 4096))
SQLITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, float("inf"))


class _LiveCollector(Collector):
    def __init__(self, state: LiveState) -> None:
        self._state = state

    def collect(self) -> Iterable[Metric]:
        readings = (
            ("betcode_sessions_active", "Sessions with a claude process or a client attached",
             self._state.sessions_active),
            ("betcode_grpc_clients_connected", "Client streams attached to sessions",
             self._state.clients_connected),
            ("betcode_clients_lagging", "Client streams catching up from SQLite after a lag",
             self._state.lagging_clients),
            ("betcode_writer_queue_depth", "Items waiting for the store writer thread",
             self._state.writer_queue_depth),
        )  # fmt: skip
        for name, text, read in readings:
            yield GaugeMetricFamily(name, text, value=read())
        yield from _limits_metrics(self._state.limits())


def _limits_metrics(limits: LimitsReading) -> Iterable[Metric]:
    """Spend, the turn queue and claude memory (docs/LIMITS.md). Per session values are
    distributions over the sessions, never labelled by session."""
    gauges = (
        ("betcode_spend_today_usd", "Every session's spend on the daemon's local day",
         limits.spend_today_usd),
        ("betcode_daily_cost_limit_usd", "daemon.limits.daily_cost_usd (0: none)",
         limits.daily_cost_limit_usd),
        ("betcode_sessions_at_cost_limit", "Sessions whose next turn asks first (own cap)",
         limits.sessions_at_cost_limit),
        ("betcode_turns_running", "Client turns running under daemon.limits.max_running_turns",
         limits.turns_running),
        ("betcode_turn_queue_length", "Messages waiting for a turn slot", limits.turns_queued),
        ("betcode_sessions_over_rss_limit", "Busy sessions whose claude is above "
         "daemon.limits.session_rss_mb", limits.sessions_over_rss_limit),
    )  # fmt: skip
    for name, text, value in gauges:
        yield GaugeMetricFamily(name, text, value=value)
    yield _distribution(
        "betcode_session_spend_usd", "Sessions by their total spend", SPEND_BUCKETS,
        limits.session_spend_usd,
    )  # fmt: skip
    yield _distribution(
        "betcode_claude_rss_bytes", "Live sessions by their claude's resident memory (process "
        "tree)", RSS_BUCKETS, limits.claude_rss_bytes,
    )  # fmt: skip
    yield CounterMetricFamily(
        "betcode_claude_memory_stops", "Idle claude processes stopped above "
        "daemon.limits.session_rss_mb", value=limits.claude_stopped_for_memory,
    )  # fmt: skip


def _distribution(
    name: str, text: str, bounds: tuple[float, ...], values: Sequence[float]
) -> GaugeHistogramMetricFamily:
    buckets = [(_bound(le), float(sum(value <= le for value in values))) for le in bounds]
    buckets.append(("+Inf", float(len(values))))
    return GaugeHistogramMetricFamily(name, text, buckets=buckets, gsum_value=float(sum(values)))


def _bound(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


class PrometheusObserver(Observer):
    """The Observer that counts into one registry (one per daemon, so daemons in one process,
    as in tests, never share counts)."""

    def __init__(self, state: LiveState, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._tools: set[str] = set()
        self._tools_lock = threading.Lock()
        r.register(_LiveCollector(state))
        self.spawns = Counter("betcode_subprocess_spawns", "claude processes started", registry=r)
        self.crashes = Counter(
            "betcode_subprocess_crashes", "claude exits counted as crashes", ["exit_code"],
            registry=r,
        )  # fmt: skip
        self.spawn_duration = Histogram(
            "betcode_subprocess_spawn_duration_seconds", "Time to start a claude process",
            ["outcome"], buckets=SPAWN_BUCKETS, registry=r,
        )  # fmt: skip
        self.lines = Counter(
            "betcode_messages_processed", "NDJSON lines of claude recorded", registry=r
        )
        self.parse_errors = Counter(
            "betcode_ndjson_parse_errors", "Lines not read as they should be", ["error_type"],
            registry=r,
        )  # fmt: skip
        self.decisions = Counter(
            "betcode_permission_decisions", "Permission decisions", ["decision"], registry=r
        )
        self.permission_wait = Histogram(
            "betcode_permission_request_duration_seconds",
            "From claude's permission request to its decision", ["tool_name", "decision"],
            buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.permission_timeouts = Counter(
            "betcode_permission_timeout", "Permission requests nobody answered in time",
            ["tool_name"], registry=r,
        )  # fmt: skip
        self.turn_duration = Histogram(
            "betcode_turn_duration_seconds", "From a user message to claude's result",
            buckets=TURN_BUCKETS, registry=r,
        )  # fmt: skip
        self.tokens = Counter("betcode_tokens", "Tokens by direction", ["direction"], registry=r)
        self.cost = Counter("betcode_cost_usd", "Cost of the turns in US dollars", registry=r)
        self.sqlite_duration = Histogram(
            "betcode_sqlite_operation_duration_seconds", "Store writer transactions",
            ["operation"], buckets=SQLITE_BUCKETS, registry=r,
        )  # fmt: skip
        self.sqlite_errors = Counter(
            "betcode_sqlite_errors", "Failed store writes", ["error_type"], registry=r
        )

    def claude_spawned(self, outcome: str, duration_s: float) -> None:
        if outcome == "ok":
            self.spawns.inc()
        self.spawn_duration.labels(outcome).observe(duration_s)

    def claude_crashed(self, exit_code: int) -> None:
        self.crashes.labels(str(exit_code)).inc()

    def lines_processed(self, count: int) -> None:
        self.lines.inc(count)

    def parse_error(self, error_type: str) -> None:
        self.parse_errors.labels(error_type).inc()

    def permission_decided(self, decision: str, tool_name: str, waited_s: float) -> None:
        tool = self._tool_label(tool_name)
        self.decisions.labels(decision).inc()
        self.permission_wait.labels(tool, decision).observe(waited_s)
        if decision == "timeout":
            self.permission_timeouts.labels(tool).inc()

    def turn_finished(self, turn: TurnReport) -> None:
        self.turn_duration.observe(turn.duration_s)
        self.tokens.labels("input").inc(turn.input_tokens)
        self.tokens.labels("output").inc(turn.output_tokens)
        self.tokens.labels("cache_read").inc(turn.cache_read_tokens)
        self.cost.inc(turn.cost_usd)

    def sqlite_operation(self, operation: str, duration_s: float) -> None:
        self.sqlite_duration.labels(operation).observe(duration_s)

    def sqlite_error(self, error_type: str) -> None:
        self.sqlite_errors.labels(error_type).inc()

    def _tool_label(self, tool_name: str) -> str:
        """MCP tools are named per server and tool: all of them count as "mcp"; beyond the
        first MAX_TOOL_LABELS names, "other"."""
        if tool_name.startswith("mcp__"):
            return "mcp"
        with self._tools_lock:
            if tool_name in self._tools:
                return tool_name
            if len(self._tools) < MAX_TOOL_LABELS:
                self._tools.add(tool_name)
                return tool_name
        return "other"


@dataclass
class MetricsEndpoint:
    """The running HTTP endpoint; `port` is the bound one (a requested port 0 picks one)."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> MetricsEndpoint:
    """Serve `registry` at http://host:port/metrics; raises OSError when it cannot bind."""
    server, thread = start_wsgi_server(port, addr=host, registry=registry)
    return MetricsEndpoint(server, thread)
