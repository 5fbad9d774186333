"""What sessions spend and the caps on it: `spend_days` and `session_cost_limits`.

Spend is what claude reported for each turn (`sessions.total_cost_usd` keeps a session's whole
total); `spend_days` keeps it by the daemon's local day, for the daily cap across every
session. A session's own cap replaces `daemon.limits.session_cost_usd` for it.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass


def local_day(now: float) -> str:
    """The daemon's local date of `now`, as spend rows store it."""
    return time.strftime("%Y-%m-%d", time.localtime(now))


@dataclass(frozen=True, slots=True)
class SessionSpend:
    """A session's spend and caps as stored: `own_limit_usd` None means the setting applies."""

    session_id: str
    total_usd: float
    own_limit_usd: float | None
    day: str
    day_total_usd: float  # every session's spend that day
    day_allowance_usd: float  # what allowed daily-cap requests added for this session


def add_turn_cost(conn: sqlite3.Connection, session_id: str, cost_usd: float, now: float) -> None:
    """Add one turn's cost to the session's spend of the day it ended."""
    conn.execute(
        "INSERT INTO spend_days (session_id, day, cost_usd) VALUES (?, ?, ?) "
        "ON CONFLICT (session_id, day) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd",
        (session_id, local_day(now), cost_usd),
    )


def session_spend(conn: sqlite3.Connection, session_id: str, now: float) -> SessionSpend:
    day = local_day(now)
    row = conn.execute(
        "SELECT COALESCE((SELECT total_cost_usd FROM sessions WHERE id = :s), 0.0), "
        "(SELECT cost_limit_usd FROM session_cost_limits WHERE session_id = :s), "
        "COALESCE((SELECT SUM(cost_usd) FROM spend_days WHERE day = :d), 0.0), "
        "COALESCE((SELECT allowance_usd FROM spend_days WHERE session_id = :s AND day = :d), 0.0)",
        {"s": session_id, "d": day},
    ).fetchone()
    total, own, day_total, allowance = row
    return SessionSpend(session_id, float(total), own, day, float(day_total), float(allowance))


def set_own_limit(conn: sqlite3.Connection, session_id: str, limit_usd: float | None) -> None:
    """The session's own cap; None returns it to the setting."""
    if limit_usd is None:
        conn.execute("DELETE FROM session_cost_limits WHERE session_id = ?", (session_id,))
        return
    conn.execute(
        "INSERT INTO session_cost_limits (session_id, cost_limit_usd) VALUES (?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET cost_limit_usd = excluded.cost_limit_usd",
        (session_id, limit_usd),
    )


def own_limits(conn: sqlite3.Connection) -> dict[str, float]:
    """Every session's own cap, by session id."""
    rows = conn.execute("SELECT session_id, cost_limit_usd FROM session_cost_limits")
    return {str(session_id): float(limit) for session_id, limit in rows}


def add_day_allowance(
    conn: sqlite3.Connection, session_id: str, day: str, allowance_usd: float
) -> None:
    """Raise the daily cap for this session on `day` by `allowance_usd`."""
    conn.execute(
        "INSERT INTO spend_days (session_id, day, allowance_usd) VALUES (?, ?, ?) "
        "ON CONFLICT (session_id, day) DO UPDATE SET "
        "allowance_usd = allowance_usd + excluded.allowance_usd",
        (session_id, day, allowance_usd),
    )


def day_spend(conn: sqlite3.Connection, day: str) -> dict[str, float]:
    """Each session's spend on `day`, by session id."""
    rows = conn.execute("SELECT session_id, cost_usd FROM spend_days WHERE day = ?", (day,))
    return {str(session_id): float(cost) for session_id, cost in rows}


def raise_cap(
    conn: sqlite3.Connection, session_id: str, scope: str, step_usd: float, day: str
) -> None:
    """An allowed cost request: the session may spend `step_usd` more from what is spent now
    (or from the cap, if that is higher), in all (`session`) or on `day` (the daily cap).
    `step_usd` is the cap the request was asked at, which the session had unless it had its
    own."""
    if scope == "session":
        total, own = conn.execute(
            "SELECT COALESCE((SELECT total_cost_usd FROM sessions WHERE id = :s), 0.0), "
            "(SELECT cost_limit_usd FROM session_cost_limits WHERE session_id = :s)",
            {"s": session_id},
        ).fetchone()
        current = step_usd if own is None else float(own)
        set_own_limit(conn, session_id, max(current, float(total)) + step_usd)
        return
    spent_today, allowance = conn.execute(
        "SELECT COALESCE((SELECT SUM(cost_usd) FROM spend_days WHERE day = :d), 0.0), "
        "COALESCE((SELECT allowance_usd FROM spend_days WHERE session_id = :s AND day = :d), 0.0)",
        {"s": session_id, "d": day},
    ).fetchone()
    current = step_usd + float(allowance)
    add_day_allowance(conn, session_id, day, max(current, float(spent_today)) + step_usd - current)


def session_totals(conn: sqlite3.Connection) -> dict[str, float]:
    """Every stored session's total spend, by session id."""
    rows = conn.execute("SELECT id, total_cost_usd FROM sessions")
    return {str(session_id): float(total) for session_id, total in rows}
