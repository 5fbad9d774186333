"""The daemon's live state as the metrics endpoint reads it, apart from the metrics themselves:
the daemon builds it whether or not metrics are on, and must not import prometheus_client to
do so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LiveState:
    """Readings of the daemon's state, taken at scrape time (from the endpoint's thread: each
    must only read, and copy before iterating)."""

    sessions_active: Callable[[], int]
    clients_connected: Callable[[], int]
    lagging_clients: Callable[[], int]
    writer_queue_depth: Callable[[], int]
