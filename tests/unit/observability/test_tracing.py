"""The tracer's span tree from reports, and the exporter choice from the OTLP variables."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from betcode.observability.hooks import TurnReport, incoming_traceparent
from betcode.observability.logs import log_fields
from betcode.observability.recent import RecentTurns
from betcode.observability.tracing import (
    MAX_BATCH_SPANS,
    TracingConfigError,
    TracingObserver,
    make_exporter,
)


def tracer() -> tuple[TracingObserver, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    return TracingObserver(SimpleSpanProcessor(exported)), exported


def report(session_id: str, cost: float = 0.5) -> TurnReport:
    return TurnReport(session_id, 2.0, 10, 20, 5, cost, False)


def test_a_turn_and_its_children() -> None:
    tracing, exported = tracer()
    token = incoming_traceparent.set("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    try:
        tracing.turn_started("s1")
    finally:
        incoming_traceparent.reset(token)
    with log_fields(session_id="s1"):  # reports without a session id: the task's session
        assert tracing.child_env()["TRACEPARENT"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
        tracing.claude_spawned("ok", 0.3)
        tracing.permission_decided("auto_allow", "Read", 0.0)
        tracing.permission_decided("user_deny", "Bash", 12.0)
        assert tracing.trace_ids() is not None
        tracing.parse_error("invalid_json")
        tracing.claude_crashed(-9)
    tracing.permission_decided("timeout", "Bash", 1.0)  # no session bound: no span
    tracing.tool_call_started("s1", "t1", "Bash")
    tracing.tool_call_finished("s1", "t1", is_error=True)
    for _ in range(MAX_BATCH_SPANS + 5):
        tracing.batch_stored("s1", 3, 0.002, 0.0001)
    tracing.turn_finished(report("s1"))
    spans = {span.name: span for span in exported.get_finished_spans()}
    turn = spans["turn"]
    assert f"{turn.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert turn.attributes is not None
    assert turn.attributes["betcode.batches"] == MAX_BATCH_SPANS + 5
    names = [span.name for span in exported.get_finished_spans()]
    assert names.count("sqlite.persist") == names.count("grpc.deliver") == MAX_BATCH_SPANS
    assert "permission.evaluate" in names
    assert names.count("permission.wait") == 1
    assert spans["tool.call"].status.status_code is StatusCode.ERROR
    assert [event.name for event in turn.events] == ["ndjson.parse_error", "claude.crashed"]
    assert all(
        span.parent is not None and span.parent.span_id == turn.context.span_id
        for span in exported.get_finished_spans()
        if span.name != "turn"
    )


def test_a_turn_without_a_result_ends_when_the_next_begins() -> None:
    tracing, exported = tracer()
    tracing.turn_started("s1")
    tracing.turn_started("s1")  # claude crashed: the first turn never saw its result
    (first,) = exported.get_finished_spans()
    assert first.status.status_code is StatusCode.ERROR
    assert not first.parent  # no traceparent: a root span
    tracing.shutdown()  # the open turn ends too
    assert len(exported.get_finished_spans()) == 2


def test_the_protocol_picks_the_exporter() -> None:
    assert isinstance(make_exporter("", {}), HttpExporter)  # the specification's default
    grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert isinstance(make_exporter("http://127.0.0.1:4317", grpc), GrpcExporter)
    traces_only = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    assert isinstance(make_exporter("", traces_only), HttpExporter)
    with pytest.raises(TracingConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        make_exporter("", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_recent_spend_covers_the_last_ten_minutes() -> None:
    now = [1000.0]
    recent = RecentTurns(clock=lambda: now[0])
    recent.turn_finished(report("s1", 0.10))
    now[0] += 300
    recent.turn_finished(report("s1", 0.20))
    spend = recent.spend("s1")
    assert spend.cost_usd == pytest.approx(0.30)
    assert spend.cost_per_hour_usd == pytest.approx(1.80)
    now[0] += 400  # the first turn is 700 s old
    assert recent.spend("s1").cost_usd == pytest.approx(0.20)
    now[0] += 600
    assert recent.spend("s1").cost_usd == 0.0
    assert recent.spend("never").cache_read_tokens == 0
