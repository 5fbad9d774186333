"""Helpers for driving ChatApp with Textual's Pilot against the fake daemon."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.errors import NoWidget
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
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

# Only guards against a hang: a loaded CI machine may take seconds for what takes milliseconds.
WAIT_SECONDS = 60.0


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    """Lets the app run until ``condition`` holds (fails, naming ``what``, if it never does)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the app never reached: {what}")
        await pilot.pause(0.01)


# The widget each prompt screen composes last: once it is there, the whole dialog is.
LAST_COMPOSED = {
    PermissionScreen: "#deny_and_interrupt",
    QuestionScreen: "#submit",
    DenyMessageScreen: "Input",
    EditInputScreen: "#edit-error",
}


def showing(app: ChatApp, screen_type: type[Screen[Any]]) -> bool:
    """Whether the active screen is a ``screen_type`` with its whole dialog mounted and its
    focus set (typed keys go to the focused widget: before that they would be lost)."""
    screen = app.screen
    return (
        isinstance(screen, screen_type)
        and bool(screen.query(LAST_COMPOSED[screen_type]))
        and screen.focused is not None
    )


def clickable(app: ChatApp, widget: Widget) -> bool:
    """Whether a click at the widget's corner (where Pilot clicks) lands on it: laid out and
    not covered. Clicking before that would hit whatever is there now."""
    region = widget.region
    if not region.area:
        return False
    try:
        return app.screen.get_widget_at(*region.offset)[0] is widget
    except NoWidget:
        return False


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
