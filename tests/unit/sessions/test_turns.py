"""Turn bookkeeping: what ends a turn, and that an ending never ends a later turn."""

# The tests assert a state, change it through a method, and assert it again: mypy keeps the
# first assertion's narrowing across the call and takes what follows for unreachable.
# mypy: disable-error-code="unreachable"

from __future__ import annotations

import pytest

from betcode.sessions.turns import Turns


def test_a_result_ends_the_running_turn() -> None:
    turns = Turns()
    assert not turns.active
    assert turns.start() == 1
    assert turns.active
    turns.finish()
    assert not turns.active


@pytest.mark.parametrize(
    ("finished_first", "later_message", "ended", "active_after"),
    [
        (False, False, True, False),  # claude exited mid-turn: that turn ends
        (True, False, False, False),  # its `result` was read first: nothing was running
        (False, True, True, True),  # a message sent after the exit waits: its turn goes on
    ],
)
def test_an_exit_ends_only_the_turn_it_knew_of(
    finished_first: bool, later_message: bool, ended: bool, active_after: bool
) -> None:
    turns = Turns()
    turns.start()
    if finished_first:
        turns.finish()
    at_exit = turns.current
    if later_message:
        turns.start()
    assert turns.exited(at_exit) is ended
    assert turns.active is active_after
    assert turns.exited(at_exit) is False  # reported once


def test_an_undelivered_message_ends_its_own_turn_only() -> None:
    turns = Turns()
    first = turns.start()
    second = turns.start()
    assert not turns.undelivered(first)  # the later message took over
    assert turns.active
    assert turns.undelivered(second)
    assert not turns.active
    assert not turns.undelivered(second)


def test_a_message_waiting_through_a_restart_runs_on_the_new_process() -> None:
    turns = Turns()
    turns.start()
    turns.delivering = 1  # its write failed on the dying process; it retries on the next
    assert turns.exited(turns.current)
    turns.runs_again(message_waiting=True)
    assert turns.active
    turns.finish()
    turns.runs_again(message_waiting=False)
    assert not turns.active
