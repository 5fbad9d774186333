"""Crash backoff arithmetic and the crash window (pure tables)."""

from __future__ import annotations

import pytest

from betcode.claude.backoff import (
    CrashWindow,
    InvalidSupervisorPolicy,
    SupervisorPolicy,
    backoff_delay,
)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0), (6, 30.0), (7, 30.0)],
)
def test_default_delays_double_from_half_a_second_up_to_thirty(
    attempt: int, expected: float
) -> None:
    assert SupervisorPolicy().restart_delay(attempt) == expected


@pytest.mark.parametrize(
    ("attempt", "initial", "maximum", "multiplier", "expected"),
    [
        (0, 0.1, 5.0, 1.5, 0.1),
        (2, 0.1, 5.0, 1.5, 0.1 * 1.5**2),
        (3, 1.0, 5.0, 4.0, 5.0),
        (5, 2.0, 9.0, 1.0, 2.0),
        (10_000, 0.5, 30.0, 2.0, 30.0),  # no float overflow far past the cap
        (10_000, 0.5, 30.0, 4.0, 30.0),
    ],
)
def test_backoff_delay_table(
    attempt: int, initial: float, maximum: float, multiplier: float, expected: float
) -> None:
    assert backoff_delay(attempt, initial, maximum, multiplier) == pytest.approx(expected)


def test_negative_attempt_is_refused() -> None:
    with pytest.raises(ValueError, match="attempt"):
        backoff_delay(-1, 0.5, 30.0, 2.0)


def test_fifth_crash_within_the_window_gives_up() -> None:
    window = CrashWindow(max_crashes=5, window_seconds=60.0)
    verdicts = [window.record(now) for now in (0.0, 10.0, 20.0, 30.0, 59.0)]
    assert verdicts == [False, False, False, False, True]


def test_crashes_older_than_the_window_do_not_count() -> None:
    window = CrashWindow(max_crashes=3, window_seconds=60.0)
    assert not window.record(0.0)
    assert not window.record(30.0)
    # The crash at 0.0 is exactly one window old at 60.0: it has expired.
    assert not window.record(60.0)
    assert window.count(60.0) == 2
    assert window.record(61.0)


def test_spaced_crashes_never_give_up() -> None:
    window = CrashWindow(max_crashes=2, window_seconds=1.0)
    assert not any(window.record(float(now)) for now in range(0, 20, 2))


def test_clear_forgets_every_crash() -> None:
    window = CrashWindow(max_crashes=2, window_seconds=60.0)
    window.record(0.0)
    window.clear()
    assert window.count(1.0) == 0
    assert not window.record(1.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("backoff_initial", 0.0, "backoff_initial"),
        ("backoff_max", 0.1, "backoff_max"),
        ("backoff_multiplier", 0.5, "backoff_multiplier"),
        ("max_crashes", 0, "max_crashes"),
        ("window_seconds", -1.0, "window_seconds"),
        ("watchdog_seconds", 0.0, "watchdog_seconds"),
        ("kill_grace_seconds", 0.0, "kill_grace_seconds"),
        ("idle_reap_seconds", 0.0, "idle_reap_seconds"),
        ("max_line_bytes", 0, "max_line_bytes"),
        ("max_line_bytes", 101 * 1024 * 1024, "max_line_bytes: .*1–100 MiB"),
    ],
)
def test_policy_refuses_nonsense(field: str, value: float, message: str) -> None:
    with pytest.raises(InvalidSupervisorPolicy, match=message):
        SupervisorPolicy(**{field: value})  # type: ignore[arg-type]  # any field, on purpose


def test_idle_reaping_can_be_switched_off() -> None:
    assert SupervisorPolicy(idle_reap_seconds=None).idle_reap_seconds is None


def test_policy_window_uses_its_numbers() -> None:
    window = SupervisorPolicy(max_crashes=2, window_seconds=5.0).crash_window()
    assert not window.record(0.0)
    assert window.record(4.9)
