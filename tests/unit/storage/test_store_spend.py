"""storage/spend.py: spend by local day, a session's own cap, and what an allowed cost request
raises (docs/LIMITS.md)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from betcode.storage import spend
from betcode.storage.sessions import add_usage, create_session, delete_session

NOW = time.mktime((2026, 11, 28, 12, 0, 0, 0, 0, -1))  # local noon
DAY = spend.local_day(NOW)


def spent(conn: sqlite3.Connection, session_id: str, cost: float, when: float = NOW) -> None:
    add_usage(conn, session_id, input_tokens=1, output_tokens=1, cost_usd=cost, now=when)
    spend.add_turn_cost(conn, session_id, cost, when)


@pytest.fixture
def two(conn: sqlite3.Connection) -> sqlite3.Connection:
    for session_id in ("a", "b"):
        create_session(conn, session_id=session_id, model="m", working_directory="/", now=NOW)
    return conn


def test_spend_is_kept_by_local_day_and_outlives_a_deleted_session(two: sqlite3.Connection) -> None:
    spent(two, "a", 1.0)
    spent(two, "a", 0.5, NOW - 86_400)  # yesterday
    spent(two, "b", 0.25)
    a = spend.session_spend(two, "a", NOW)
    assert (a.total_usd, a.day, a.day_total_usd, a.own_limit_usd) == (1.5, DAY, 1.25, None)
    delete_session(two, "b")
    assert spend.session_spend(two, "a", NOW).day_total_usd == 1.25


def test_an_allowed_session_request_adds_a_step_from_what_is_spent(two: sqlite3.Connection) -> None:
    spent(two, "a", 3.0)  # the turn went past the setting's 2.0
    spend.raise_cap(two, "a", "session", 2.0, DAY)
    assert spend.session_spend(two, "a", NOW).own_limit_usd == 5.0
    spend.raise_cap(two, "a", "session", 2.0, DAY)  # below the cap now: from the cap
    assert spend.session_spend(two, "a", NOW).own_limit_usd == 7.0
    spend.set_own_limit(two, "a", None)
    assert spend.own_limits(two) == {}


def test_an_allowed_daily_request_raises_that_session_s_day_only(two: sqlite3.Connection) -> None:
    spent(two, "a", 0.75)
    spent(two, "b", 0.5)  # the day: 1.25 of a 1.0 cap
    spend.raise_cap(two, "a", "day", 1.0, DAY)
    a, b = spend.session_spend(two, "a", NOW), spend.session_spend(two, "b", NOW)
    assert a.day_allowance_usd == 1.25  # 1.0 + 1.25 allowed: another 1.0 from the 1.25 spent
    assert b.day_allowance_usd == 0.0
    assert spend.session_spend(two, "a", NOW + 86_400).day_allowance_usd == 0.0  # next day
