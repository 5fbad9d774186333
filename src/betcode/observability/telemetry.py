"""What the daemon switches on at start: the observers the domain reports to, and the
metrics endpoint.

`Telemetry.start` installs the observers — always the recent turns (`betcode top`'s cost
rate), the Prometheus metrics when `metrics_listen` is set — and binds the endpoint; `stop`
closes it and puts back the previous observer. Off, nothing listens.
"""

from __future__ import annotations

import logging

from betcode.config.settings import ObservabilitySettings, split_host_port
from betcode.observability import hooks
from betcode.observability.metrics import (
    LiveState,
    MetricsEndpoint,
    PrometheusObserver,
    serve_metrics,
)
from betcode.observability.recent import RecentTurns
from betcode.server.binding import BindError

log = logging.getLogger(__name__)


class Telemetry:
    def __init__(self, settings: ObservabilitySettings) -> None:
        self.settings = settings
        self.recent = RecentTurns()
        self.metrics: PrometheusObserver | None = None
        self.endpoint: MetricsEndpoint | None = None
        self._previous: hooks.Observer | None = None

    def start(self, live: LiveState) -> None:
        """Raises BindError when the metrics address cannot be bound (the settings checked
        already that it is a loopback HOST:PORT)."""
        members: list[hooks.Observer] = [self.recent]
        listen = self.settings.metrics_listen
        if listen:
            members.append(self._serve_metrics(listen, live))
        self._previous = hooks.install(hooks.ObserverGroup(members))

    def _serve_metrics(self, listen: str, live: LiveState) -> PrometheusObserver:
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

    @property
    def metrics_port(self) -> int | None:
        return self.endpoint.port if self.endpoint is not None else None

    def stop(self) -> None:
        if self._previous is not None:
            hooks.install(self._previous)
            self._previous = None
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None
