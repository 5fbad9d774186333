"""The relay's count of wrong pairing tickets (relay/pairing.py): per browser address, and over
the relay instance for guesses spread over many addresses; both forget a guess once it is older
than the window. (tests/relay/test_relay_pairing.py provokes the per-address limit for real.)"""

from __future__ import annotations

import pytest

from betcode.relay.pairing import (
    MAX_WRONG_PER_ADDRESS,
    MAX_WRONG_PER_RELAY,
    WRONG_WINDOW_SECONDS,
    TooManyWrongTickets,
    WrongGuesses,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_held_back_after_its_wrong_tickets_others_are_not() -> None:
    clock = Clock()
    guesses = WrongGuesses(clock)
    for _ in range(MAX_WRONG_PER_ADDRESS):
        guesses.check("browser:a")
        guesses.wrong("browser:a")
        clock.now += 1
    with pytest.raises(TooManyWrongTickets) as held:
        guesses.check("browser:a")
    assert held.value.retry_after == pytest.approx(WRONG_WINDOW_SECONDS - MAX_WRONG_PER_ADDRESS)
    guesses.check("browser:b")
    clock.now += held.value.retry_after  # the oldest guess leaves the window
    guesses.check("browser:a")


def test_guesses_spread_over_many_addresses_hold_back_the_whole_relay() -> None:
    clock = Clock()
    guesses = WrongGuesses(clock)
    for index in range(MAX_WRONG_PER_RELAY):
        address = f"browser:{index}"
        guesses.check(address)
        guesses.wrong(address)
    with pytest.raises(TooManyWrongTickets):
        guesses.check("browser:never-seen")
    clock.now += WRONG_WINDOW_SECONDS
    guesses.check("browser:never-seen")
    for index in range(MAX_WRONG_PER_RELAY):
        guesses.check(f"browser:{index}")
    assert guesses.tracked() == 0  # addresses whose guesses are old are forgotten
