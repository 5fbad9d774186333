"""What the daemon switches on at start: the observers the domain reports to, the metrics
endpoint and the trace exporter.

`Telemetry.start` installs the observers — always the recent turns (`betcode top`'s cost
rate); the Prometheus metrics when `metrics_listen` is set; the traces when an OTLP endpoint is
configured — and binds the endpoint; `stop` closes both, exports the spans still buffered and
puts back the previous observer. Off, nothing listens and nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from betcode.config.addresses import split_host_port
from betcode.config.settings import ObservabilitySettings
from betcode.daemon_socket import BindError
from betcode.observability import hooks
from betcode.observability.live_state import LiveState
from betcode.observability.logs import use_trace_ids
from betcode.observability.recent import RecentTurns

if TYPE_CHECKING:
    from betcode.observability.metrics import MetricsEndpoint, PrometheusObserver
    from betcode.observability.tracing import TracingObserver

log = logging.getLogger(__name__)


def otlp_endpoint(setting: str, environ: Mapping[str, str]) -> str:
    """Where traces go: the setting, else the standard variables; "" when tracing is off."""
    return (
        setting
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    ).strip()


class Telemetry:
    def __init__(self, settings: ObservabilitySettings, environ: Mapping[str, str]) -> None:
        self.settings = settings
        self.environ = environ
        self.recent = RecentTurns()
        self.metrics: PrometheusObserver | None = None
        self.endpoint: MetricsEndpoint | None = None
        self.tracing: TracingObserver | None = None
        self._previous: hooks.Observer | None = None
        self._installed: hooks.Observer | None = None

    def start(self, live: LiveState) -> None:
        """Raises BindError when the metrics address cannot be bound (the settings checked
        already that it is a loopback HOST:PORT)."""
        members: list[hooks.Observer] = [self.recent]
        listen = self.settings.metrics_listen
        if listen:
            members.append(self._serve_metrics(listen, live))
        self.tracing = self._start_tracing()
        if self.tracing is not None:
            members.append(self.tracing)
            use_trace_ids(self.tracing.trace_ids)
        self._installed = hooks.ObserverGroup(members)
        self._previous = hooks.install(self._installed)

    def _serve_metrics(self, listen: str, live: LiveState) -> PrometheusObserver:
        # prometheus_client is imported only when metrics are on.
        from betcode.observability.metrics import PrometheusObserver, serve_metrics

        host, port = split_host_port(listen)
        metrics = PrometheusObserver(live)
        try:
            self.endpoint = serve_metrics(metrics.registry, host, port)
        except OSError as error:
            raise BindError(f"metrics at {listen!r}: cannot listen: {error}") from error
        self.metrics = metrics
        shown = f"[{host}]" if ":" in host else host
        log.info("metrics at http://%s:%d/metrics", shown, self.endpoint.port)
        return metrics

    def _start_tracing(self) -> TracingObserver | None:
        endpoint = otlp_endpoint(self.settings.otlp_endpoint, self.environ)
        if not endpoint:
            return None
        # The OpenTelemetry SDK is imported only when traces are on.
        from betcode.observability.tracing import TracingConfigError, TracingObserver, make_exporter

        try:
            exporter = make_exporter(self.settings.otlp_endpoint, self.environ)
        except TracingConfigError as error:
            log.error("traces are off: %s", error)
            return None
        log.info("traces to %s (OTLP)", endpoint)
        return TracingObserver.exporting(exporter)

    @property
    def metrics_port(self) -> int | None:
        return self.endpoint.port if self.endpoint is not None else None

    async def stop(self) -> None:
        # Put back what was there, unless another daemon in this process (tests) took over
        # since: its observer stays.
        if self._previous is not None and hooks.observer() is self._installed:
            hooks.install(self._previous)
        self._previous = self._installed = None
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None
        if self.tracing is not None:
            use_trace_ids(None)
            # Exporting what is buffered may wait on the network: off the event loop.
            await asyncio.to_thread(self.tracing.shutdown)
            self.tracing = None
