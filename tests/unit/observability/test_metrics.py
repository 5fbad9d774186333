"""The Prometheus observer: what each report counts, and labels that stay bounded."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from betcode.observability.hooks import TurnReport
from betcode.observability.live_state import LiveState
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
