"""The daemon's live state as the metrics endpoint reads it, apart from the metrics themselves:
the daemon builds it whether or not metrics are on, and must not import prometheus_client to
do so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LimitsReading:
    """What the limits (docs/LIMITS.md) last found: spend, the turn queue, claude memory. Per
    session values come without their session ids (metric labels never name a session)."""

    spend_today_usd: float = 0.0  # every session's, on the daemon's local day
    daily_cost_limit_usd: float = 0.0  # 0: none
    session_spend_usd: tuple[float, ...] = ()  # each session's total
    sessions_at_cost_limit: int = 0
    turns_running: int = 0
    turns_queued: int = 0
    claude_rss_bytes: tuple[int, ...] = ()  # each live session's claude process tree
    sessions_over_rss_limit: int = 0
    claude_stopped_for_memory: int = 0


@dataclass(frozen=True, slots=True)
class LiveState:
    """Readings of the daemon's state, taken at scrape time (from the endpoint's thread: each
    must only read, and copy before iterating)."""

    sessions_active: Callable[[], int]
    clients_connected: Callable[[], int]
    lagging_clients: Callable[[], int]
    writer_queue_depth: Callable[[], int]
    limits: Callable[[], LimitsReading] = LimitsReading
