"""Thin widgets: each draws one view-model object and redraws it on ``sync``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Collapsible, Markdown, OptionList, Static, TextArea
from textual.widgets.markdown import MarkdownStream
from textual.widgets.option_list import Option

from betcode.cli.chat.palette import Suggestion
from betcode.cli.chat.state import (
    Block,
    NoticeBlock,
    Status,
    TextBlock,
    ToolBlock,
    UserBlock,
)
from betcode.cli.chat.texts import (
    SPINNER,
    SPINNING,
    result_preview,
    status_line,
    tool_summary,
)

MAX_SHOWN_OUTPUT = 20_000  # characters of a tool result drawn; the rest is summarised


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


EDIT_KEYS = ("old_string", "new_string")


def readable_input(tool_input: dict[str, Any]) -> Text:
    """A tool's input for a person deciding on it: text as it is (a command or a file's content,
    not JSON-escaped), an edit as - / + lines, anything else as JSON."""
    old, new = (tool_input.get(key) for key in EDIT_KEYS)
    is_edit = isinstance(old, str) and isinstance(new, str)
    shown = Text()
    for key, value in tool_input.items():
        if is_edit and key in EDIT_KEYS:
            continue
        if not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False)
        if "\n" in value:
            shown.append(f"{key}:\n")
            shown.append("".join(f"  {line}\n" for line in value.splitlines()))
        else:
            shown.append(f"{key}: {value}\n")
    if is_edit:
        shown.append("change:\n")
        for sign, lines, style in (("-", old, "red"), ("+", new, "green")):
            for line in str(lines).splitlines() or [""]:
                shown.append(f"  {sign} {line}\n", style=style)
    shown.rstrip()
    return shown


MAX_NESTED_TEXT = 100  # characters of a Task subagent's text line shown inside its call


class Transcript(VerticalScroll):
    """The conversation, newest at the bottom; arrows and page keys scroll it when focused
    (letters typed while it has focus go to the message input)."""


class UserView(Static):
    def __init__(self, block: UserBlock) -> None:
        super().__init__(Text(block.text), classes="user")

    async def sync(self, block: Block) -> None:
        assert isinstance(block, UserBlock)
        self.update(Text(block.text))


class NoticeView(Static):
    def __init__(self, block: NoticeBlock) -> None:
        super().__init__(Text(block.text), classes="notice error" if block.is_error else "notice")

    async def sync(self, block: Block) -> None:
        assert isinstance(block, NoticeBlock)
        self.update(Text(block.text))


class AssistantView(Markdown):
    """Assistant text as markdown, appended to as deltas arrive."""

    def __init__(self, block: TextBlock) -> None:
        super().__init__(block.text, classes="assistant")
        self._shown = len(block.text)
        self._stream: MarkdownStream | None = None

    async def sync(self, block: Block) -> None:
        assert isinstance(block, TextBlock)
        fresh = block.text[self._shown :]
        self._shown = len(block.text)
        if fresh:
            if self._stream is None:
                self._stream = Markdown.get_stream(self)
            await self._stream.write(fresh)
        if block.closed and self._stream is not None:
            await self._stream.stop()
            self._stream = None


class ToolView(Collapsible):
    """One tool call: a title line while it runs, then the first lines of its result under it;
    expanding it shows the whole input and result."""

    def __init__(self, block: ToolBlock) -> None:
        self._input = Static(classes="tool-input")
        self._nested = Static(classes="tool-nested")
        self._output = Static(classes="tool-output")
        self._preview = Static(classes="tool-preview")
        super().__init__(
            self._input, self._nested, self._output, title="", collapsed=True, classes="tool"
        )
        self._draw(block)

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield self._preview

    async def sync(self, block: Block) -> None:
        assert isinstance(block, ToolBlock)
        self._draw(block)

    def _draw(self, block: ToolBlock) -> None:
        mark = "…" if not block.done else ("✗" if block.is_error else "✓")
        summary = tool_summary(block.name, block.input)
        self.title = f"{mark} {block.name}({summary})" if summary else f"{mark} {block.name}"
        if block.nested:
            calls = sum(1 for b in block.nested if isinstance(b, ToolBlock))
            self.title += f" · subagent: {calls} tool call(s)"
        self._nested.display = bool(block.nested)
        self._nested.update(nested_activity(block.nested))
        self.set_class(block.is_error, "error")
        self.set_class(block.done, "done")
        self._input.update(readable_input(block.input))
        if block.output is None:
            self._output.update(Text("running…"))
            return
        self._preview.update(Text(result_preview(block.output)))
        output = block.output
        if len(output) > MAX_SHOWN_OUTPUT:
            hidden = len(output) - MAX_SHOWN_OUTPUT
            output = f"{output[:MAX_SHOWN_OUTPUT]}\n… ({hidden:,} more characters)"
        self._output.update(Text(output or "(no output)"))


def nested_activity(blocks: Sequence[Block]) -> Text:
    """A Task subagent's activity, one line per step, inside its Task call."""
    lines = []
    for block in blocks:
        if isinstance(block, ToolBlock):
            mark = "…" if not block.done else ("✗" if block.is_error else "✓")
            summary = tool_summary(block.name, block.input)
            lines.append(
                f"  {mark} {block.name}({summary})" if summary else f"  {mark} {block.name}"
            )
        elif isinstance(block, TextBlock) and block.text.strip():
            first = block.text.strip().splitlines()[0]
            lines.append(f"  {first[:MAX_NESTED_TEXT]}")
    return Text("\n".join(lines))


BlockView = UserView | NoticeView | AssistantView | ToolView


def view_for(block: Block) -> BlockView:
    if isinstance(block, UserBlock):
        return UserView(block)
    if isinstance(block, NoticeBlock):
        return NoticeView(block)
    if isinstance(block, TextBlock):
        return AssistantView(block)
    return ToolView(block)


class StatusBar(Static):
    """The status line; its spinner turns while claude thinks or runs a tool."""

    SPINNER_SECONDS = 0.1

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self._status = Status()
        self._frame = 0

    def on_mount(self) -> None:
        self.set_interval(self.SPINNER_SECONDS, self._turn_spinner)

    def show(self, status: Status) -> None:
        self._status = status
        spinner = SPINNER[self._frame] if status.activity in SPINNING else ""
        self.update(Text(status_line(status, spinner)))
        self.set_class(status.read_only, "read-only")
        self.set_class(bool(status.connection), "disconnected")

    def _turn_spinner(self) -> None:
        if self._status.activity in SPINNING:
            self._frame = (self._frame + 1) % len(SPINNER)
            self.show(self._status)


class LockNotice(Static):
    """Above the message input while a RequestInputLock waits: to the holder, that someone
    asks for the lock and how long it has to keep it; to the requester, whom it waits for."""

    def show(self, status: Status) -> None:
        self.update(Text(status.lock_notice))
        self.display = bool(status.lock_notice)
        self.set_class(status.asked_for_lock, "asked")


class PromptArea(TextArea):
    """The message input: Enter sends, ctrl+j (or shift+enter) starts a new line; page up and
    down scroll the conversation (the input is a few lines: paging it means nothing)."""

    BINDINGS = [  # noqa: RUF012 (Textual's own declaration style)
        Binding("pageup", "app.scroll_transcript(-1)", "scroll up", show=False),
        Binding("pagedown", "app.scroll_transcript(1)", "scroll down", show=False),
    ]

    PALETTE_KEYS = frozenset({"tab", "up", "down", "escape"})

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class PaletteKey(Message):
        """Tab, an arrow or Escape while the palette's list is open."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    palette_open = False  # set by the app while suggestions are shown

    async def _on_key(self, event: events.Key) -> None:
        if self.palette_open and event.key in self.PALETTE_KEYS:
            event.stop()
            event.prevent_default()
            self.post_message(self.PaletteKey(event.key))
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in ("ctrl+j", "shift+enter"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)


class Suggestions(OptionList):
    """The palette's list, above the message input. It never takes the focus: the keys stay in
    the input, which hands Tab, the arrows and Escape to the app while the list is open."""

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self.can_focus = False
        self.display = False

    def show(self, suggestions: Sequence[Suggestion]) -> None:
        self.clear_options()
        self.add_options(
            Option(Text.assemble((item.label, "bold"), "  ", (item.description, "dim")))
            for item in suggestions
        )
        self.display = bool(suggestions)
        if suggestions:
            self.highlighted = 0
