"""Which event loop the daemon runs on: uvloop when installed, BETCODE_EVENT_LOOP to choose."""

from __future__ import annotations

import importlib.util

import pytest

from betcode import event_loop
from betcode.event_loop import EventLoopUnavailable, chosen_event_loop, running_event_loop


def test_uvloop_is_the_default_when_installed() -> None:
    assert chosen_event_loop({}) == "uvloop"
    assert chosen_event_loop({"BETCODE_EVENT_LOOP": " AsyncIO "}) == "asyncio"
    assert chosen_event_loop({"BETCODE_EVENT_LOOP": "uvloop"}) == "uvloop"


def test_without_uvloop_the_default_is_asyncio_and_asking_for_it_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "uvloop" else real_find_spec(name, *args),
    )
    assert chosen_event_loop({}) == "asyncio"
    with pytest.raises(EventLoopUnavailable, match="uvloop is not installed"):
        chosen_event_loop({"BETCODE_EVENT_LOOP": "uvloop"})


def test_an_unknown_loop_name_is_refused_with_the_choices() -> None:
    with pytest.raises(EventLoopUnavailable, match=r"'tokio' is not one of: uvloop, asyncio"):
        chosen_event_loop({"BETCODE_EVENT_LOOP": "tokio"})


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_uses_the_named_loop(name: str) -> None:
    async def which() -> str:
        return running_event_loop()

    assert event_loop.run(which(), name) == name
