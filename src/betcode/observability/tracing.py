"""OpenTelemetry traces of turns, exported over OTLP; off unless an endpoint is
configured (`daemon.observability.otlp_endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).

Each turn is a root span (`turn`), or a child of the client's trace when its Converse stream
carried a `traceparent`; its children are `claude.spawn`, `permission.evaluate` (a rule or
grant decided) or `permission.wait` (a person, or the TTL), `tool.call` (from the tool use
claude printed to its result), `sqlite.persist` (a batch from append to commit) and
`grpc.deliver` (its frames onto the clients' queues); an unreadable line of claude and a crash
are events on the turn span (`ndjson.parse_error`, `claude.crashed`). A claude started during
a turn gets the turn's context as TRACEPARENT, so Claude Code's own telemetry, when enabled,
joins the trace.

The exporters read the standard `OTEL_EXPORTER_OTLP_*` variables themselves (headers,
timeout, compression, certificates); `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` picks `grpc` or
`http/protobuf` (the default, as the OpenTelemetry specification says). Span attributes carry
ids, names, counts and outcomes, never a prompt, a tool input or a secret.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from betcode import __version__
from betcode.observability.hooks import Observer, TurnReport, incoming_traceparent
from betcode.observability.logs import current_log_fields

log = logging.getLogger(__name__)

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "http/protobuf"
MAX_BATCH_SPANS = 50  # per turn: a long streamed answer makes hundreds of batches
_propagator = TraceContextTextMapPropagator()


class TracingConfigError(ValueError):
    """An OTLP setting the exporters cannot use (says which variable and value)."""


def make_exporter(setting: str, environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP span exporter for the configured protocol. The exporters read the other
    OTEL_EXPORTER_OTLP_* variables from the process environment themselves."""
    name = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    protocol = environ.get(name, "").strip()
    if not protocol:
        name = "OTEL_EXPORTER_OTLP_PROTOCOL"
        protocol = environ.get(name, "").strip() or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise TracingConfigError(f"{name}={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=setting or None)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    # Like OTEL_EXPORTER_OTLP_ENDPOINT, the setting is the base URL: the signal path is added.
    return HttpExporter(endpoint=setting.rstrip("/") + "/v1/traces" if setting else None)


@dataclass
class _Turn:
    span: Span
    tools: dict[str, Span] = field(default_factory=dict)
    batches: int = 0


class TracingObserver(Observer):
    """Spans from the domain's reports, which name their session or come from a task bound to
    one. The reports used here all come from the event loop; the turn table is still locked,
    as the logs' formatter reads it (`trace_ids`) from whatever thread logs."""

    def __init__(self, processor: SpanProcessor) -> None:
        resource = Resource.create(
            {"service.name": "betcode-daemon", "service.version": __version__}
        )
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("betcode")
        self._turns: dict[str, _Turn] = {}
        self._lock = threading.Lock()

    @classmethod
    def exporting(cls, exporter: SpanExporter) -> TracingObserver:
        return cls(BatchSpanProcessor(exporter))

    # ---- turns ----

    def turn_started(self, session_id: str) -> None:
        parent = _propagator.extract({"traceparent": incoming_traceparent.get()})
        span = self._tracer.start_span(
            "turn", context=parent, kind=SpanKind.SERVER,
            attributes={"betcode.session_id": session_id},
        )  # fmt: skip
        with self._lock:
            previous = self._turns.pop(session_id, None)
            self._turns[session_id] = _Turn(span)
        if previous is not None:  # claude exited or the message never arrived: no result
            _end(previous, StatusCode.ERROR, "ended without a result")

    def turn_finished(self, turn: TurnReport) -> None:
        with self._lock:
            ended = self._turns.pop(turn.session_id, None)
        if ended is None:
            return
        ended.span.set_attributes(
            {
                "betcode.tokens.input": turn.input_tokens,
                "betcode.tokens.output": turn.output_tokens,
                "betcode.tokens.cache_read": turn.cache_read_tokens,
                "betcode.cost_usd": turn.cost_usd,
                "betcode.batches": ended.batches,
            }
        )
        _end(ended, StatusCode.ERROR if turn.is_error else StatusCode.OK, "")

    # ---- children ----

    def claude_spawned(self, outcome: str, duration_s: float) -> None:
        self._child("claude.spawn", None, duration_s, {"betcode.outcome": outcome},
                    failed=outcome != "ok")  # fmt: skip

    def claude_crashed(self, exit_code: int) -> None:
        self._event("claude.crashed", {"betcode.exit_code": exit_code})

    def parse_error(self, error_type: str) -> None:
        self._event("ndjson.parse_error", {"betcode.error_type": error_type})

    def permission_decided(self, decision: str, tool_name: str, waited_s: float) -> None:
        name = "permission.evaluate" if decision.startswith("auto_") else "permission.wait"
        attributes = {"betcode.decision": decision, "betcode.tool_name": tool_name}
        self._child(name, None, waited_s, attributes)

    def tool_call_started(self, session_id: str, tool_use_id: str, tool_name: str) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None or tool_use_id in turn.tools:
                return
            turn.tools[tool_use_id] = self._tracer.start_span(
                "tool.call", context=trace.set_span_in_context(turn.span),
                attributes={"betcode.tool_name": tool_name, "betcode.tool_use_id": tool_use_id},
            )  # fmt: skip

    def tool_call_finished(self, session_id: str, tool_use_id: str, is_error: bool) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            span = turn.tools.pop(tool_use_id, None) if turn is not None else None
        if span is not None:
            span.set_status(Status(StatusCode.ERROR if is_error else StatusCode.OK))
            span.end()

    def batch_stored(self, session_id: str, rows: int, store_s: float, deliver_s: float) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None:
                return
            turn.batches += 1
            if turn.batches > MAX_BATCH_SPANS:
                return
        now = time.time_ns()
        deliver_ns = int(deliver_s * 1e9)
        self._child("sqlite.persist", session_id, store_s, {"betcode.rows": rows},
                    end_ns=now - deliver_ns)  # fmt: skip
        self._child("grpc.deliver", session_id, deliver_s, {}, end_ns=now)

    def child_env(self) -> dict[str, str]:
        turn = self._current_turn(None)
        if turn is None:
            return {}
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(turn.span))
        return {"TRACEPARENT": carrier["traceparent"]} if "traceparent" in carrier else {}

    # ---- the logs' trace ids ----

    def trace_ids(self) -> tuple[str, str] | None:
        """(trace_id, span_id) of the turn of the session this task works for, if any."""
        turn = self._current_turn(None)
        if turn is None:
            return None
        context = turn.span.get_span_context()
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"

    def shutdown(self) -> None:
        """Ends what is open and exports everything still buffered."""
        with self._lock:
            open_turns, self._turns = list(self._turns.values()), {}
        for turn in open_turns:
            _end(turn, StatusCode.ERROR, "the daemon stopped during the turn")
        self.provider.shutdown()

    def _current_turn(self, session_id: str | None) -> _Turn | None:
        key = session_id or current_log_fields().get("session_id", "")
        with self._lock:
            return self._turns.get(key)

    def _event(self, name: str, attributes: Mapping[str, str | int]) -> None:
        turn = self._current_turn(None)
        if turn is not None:
            turn.span.add_event(name, dict(attributes))

    def _child(
        self,
        name: str,
        session_id: str | None,
        duration_s: float,
        attributes: Mapping[str, str | int],
        *,
        failed: bool = False,
        end_ns: int | None = None,
    ) -> None:
        turn = self._current_turn(session_id)
        if turn is None:
            return
        end = end_ns if end_ns is not None else time.time_ns()
        span = self._tracer.start_span(
            name, context=trace.set_span_in_context(turn.span), attributes=dict(attributes),
            start_time=end - int(max(duration_s, 0.0) * 1e9),
        )  # fmt: skip
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)


def _end(turn: _Turn, code: StatusCode, description: str) -> None:
    for span in turn.tools.values():
        span.end()
    turn.span.set_status(Status(code, description or None))
    turn.span.end()
