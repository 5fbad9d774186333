"""The Prometheus observer: what each report counts, and labels that stay bounded."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from betcode.limits.memory import MIB
from betcode.observability.hooks import TurnReport
from betcode.observability.live_state import LimitsReading, LiveState
from betcode.observability.metrics import MAX_TOOL_LABELS, PrometheusObserver


def observer() -> PrometheusObserver:
    return PrometheusObserver(LiveState(lambda: 2, lambda: 3, lambda: 1, lambda: 7))


def samples(metrics: PrometheusObserver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_reports_become_samples() -> None:
    metrics = observer()
    metrics.claude_spawned("ok", 0.2)
    metrics.claude_spawned("error", 0.01)
    metrics.claude_crashed(-9)
    metrics.lines_processed(5)
    metrics.parse_error("invalid_json")
    metrics.permission_decided("timeout", "Bash", 3600.0)
    metrics.turn_finished(TurnReport("s", 1.5, 10, 20, 5, 0.25, False))
    metrics.sqlite_error("OperationalError")
    got = samples(metrics)
    assert got[("betcode_subprocess_spawns_total", ())] == 1
    assert got[("betcode_subprocess_spawn_duration_seconds_count", (("outcome", "error"),))] == 1
    assert got[("betcode_subprocess_crashes_total", (("exit_code", "-9"),))] == 1
    assert got[("betcode_messages_processed_total", ())] == 5
    assert got[("betcode_ndjson_parse_errors_total", (("error_type", "invalid_json"),))] == 1
    assert got[("betcode_permission_timeout_total", (("tool_name", "Bash"),))] == 1
    assert got[("betcode_tokens_total", (("direction", "cache_read"),))] == 5
    assert got[("betcode_cost_usd_total", ())] == 0.25
    assert got[("betcode_sqlite_errors_total", (("error_type", "OperationalError"),))] == 1
    assert got[("betcode_sessions_active", ())] == 2
    assert got[("betcode_grpc_clients_connected", ())] == 3
    assert got[("betcode_clients_lagging", ())] == 1
    assert got[("betcode_writer_queue_depth", ())] == 7


def test_tool_labels_are_bounded() -> None:
    metrics = observer()
    for n in range(MAX_TOOL_LABELS + 30):
        metrics.permission_decided("auto_allow", f"Tool{n}", 0.0)
    metrics.permission_decided("auto_allow", "mcp__server__tool", 0.0)
    tools = {
        dict(labels)["tool_name"]
        for name, labels in samples(metrics)
        if name == "betcode_permission_request_duration_seconds_count"
    }
    assert len(tools) == MAX_TOOL_LABELS + 2  # the first 50, "other" and "mcp"
    assert {"other", "mcp"} <= tools


def test_the_limits_are_read_at_scrape_time_without_session_labels() -> None:
    reading = LimitsReading(
        spend_today_usd=1.5,
        daily_cost_limit_usd=5.0,
        session_spend_usd=(0.005, 0.5, 2.0),
        sessions_at_cost_limit=1,
        turns_running=2,
        turns_queued=3,
        claude_rss_bytes=(200 * MIB, 1500 * MIB),
        sessions_over_rss_limit=1,
        claude_stopped_for_memory=4,
    )
    state = LiveState(lambda: 0, lambda: 0, lambda: 0, lambda: 0, lambda: reading)
    got = samples(PrometheusObserver(state))
    assert got[("betcode_spend_today_usd", ())] == 1.5
    assert got[("betcode_daily_cost_limit_usd", ())] == 5.0
    assert got[("betcode_sessions_at_cost_limit", ())] == 1
    assert (got[("betcode_turns_running", ())], got[("betcode_turn_queue_length", ())]) == (2, 3)
    assert got[("betcode_sessions_over_rss_limit", ())] == 1
    assert got[("betcode_claude_memory_stops_total", ())] == 4
    assert got[("betcode_session_spend_usd_bucket", (("le", "0.01"),))] == 1
    assert got[("betcode_session_spend_usd_bucket", (("le", "1"),))] == 2
    assert got[("betcode_session_spend_usd_bucket", (("le", "+Inf"),))] == 3
    assert got[("betcode_session_spend_usd_gsum", ())] == pytest.approx(2.505)
    assert got[("betcode_claude_rss_bytes_bucket", (("le", str(256 * MIB)),))] == 1
    assert got[("betcode_claude_rss_bytes_bucket", (("le", str(2048 * MIB)),))] == 2
    assert got[("betcode_claude_rss_bytes_gcount", ())] == 2
    limit_samples = [key for key in got if key[0].startswith(("betcode_session", "betcode_claude"))]
    assert all(label in ("le",) for _, labels in limit_samples for label, _ in labels)
