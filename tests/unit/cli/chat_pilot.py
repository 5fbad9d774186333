"""Helpers for driving ChatApp with Textual's Pilot against the fake daemon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Static

from betcode.cli.chat.app import ChatApp
from betcode.cli.chat.screens import (
    DenyMessageScreen,
    EditInputScreen,
    PermissionScreen,
    QuestionScreen,
)
from betcode.cli.chat.widgets import (
    AssistantView,
    NoticeView,
    StatusBar,
    ToolView,
    Transcript,
    UserView,
)

WAIT_STEPS = 500  # x 10 ms: a generous bound for a condition that should hold within a few steps


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    """Lets the app run until ``condition`` holds (fails, naming ``what``, if it never does)."""
    for _ in range(WAIT_STEPS):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"the app never reached: {what}")


# The widget each prompt screen composes last: once it is there, the whole dialog is.
LAST_COMPOSED = {
    PermissionScreen: "#deny_and_interrupt",
    QuestionScreen: "#submit",
    DenyMessageScreen: "Input",
    EditInputScreen: "#edit-error",
}


def showing(app: ChatApp, screen_type: type[Screen[Any]]) -> bool:
    """Whether the active screen is a ``screen_type`` with its whole dialog mounted."""
    screen = app.screen
    return isinstance(screen, screen_type) and bool(screen.query(LAST_COMPOSED[screen_type]))


def transcript(app: ChatApp) -> list[tuple[str, str]]:
    """The conversation as (kind, text) pairs, in screen order."""
    entries: list[tuple[str, str]] = []
    for widget in app.query_one(Transcript).children:
        if isinstance(widget, AssistantView):
            entries.append(("assistant", widget.source))
        elif isinstance(widget, ToolView):
            entries.append(("tool", widget.title))
        elif isinstance(widget, UserView):
            entries.append(("user", str(widget.content)))
        elif isinstance(widget, NoticeView):
            entries.append(("notice", str(widget.content)))
        elif isinstance(widget, Static):
            entries.append(("note", str(widget.content)))
    return entries


def status_text(app: ChatApp) -> str:
    return str(app.query_one(StatusBar).content)
