"""The full-screen chat: history first (batched), then the live conversation.

The app only moves things between the stream, the view-model and the widgets: events go
into ``ChatModel``, the changes it reports are drawn, and keys become requests on the stream.
Quitting closes this client's stream only; the session keeps running in the daemon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, ClassVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static, TextArea

from betcode.cli.chat.actions import CtrlC, CtrlCPolicy, PermissionAnswer
from betcode.cli.chat.completion import Palette
from betcode.cli.chat.model import ChatModel
from betcode.cli.chat.palette import (
    CLEAR,
    COMPACT,
    MODEL,
    ChatCommand,
    chat_command,
    location_of,
    offset_of,
)
from betcode.cli.chat.screens import DENY, PermissionScreen, QuestionScreen
from betcode.cli.chat.state import LOCK_REQUEST_KEY, Changes, PermissionPrompt
from betcode.cli.chat.widgets import (
    BlockView,
    LockNotice,
    PromptArea,
    StatusBar,
    Suggestions,
    Transcript,
    view_for,
)
from betcode.cli.connection import DaemonClient, DaemonError
from betcode.cli.conversation import ConnectionChange, ConversationStream

FRAME_SECONDS = 1 / 30
MAX_HISTORY_VIEWS = 200  # blocks drawn when attaching; older ones stay in the model only
QUESTION_DECLINED = "The user declined to answer."
LOCK_REQUEST_CHECK_SECONDS = 1.0  # how often lock requests past their deadline are looked for


def describe_connection(change: ConnectionChange) -> str:
    if change.connected:
        return ""
    return f"disconnected ({change.reason}); retrying in {change.retry_in:.1f} s"


class ChatApp(App[None]):
    CSS_PATH = "chat.tcss"
    TITLE = "betcode chat"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "cancel turn / quit", priority=True),
        Binding(LOCK_REQUEST_KEY, "request_lock", "request input lock"),
        Binding("ctrl+q", "quit", "quit", priority=True),
    ]

    def __init__(
        self,
        client: DaemonClient,
        stream: ConversationStream,
        *,
        clock: Callable[[], float] = time.monotonic,
        reattach_hint: bool = True,
        branch: str = "",
    ) -> None:
        super().__init__()
        self.reattach_hint = reattach_hint  # False when the daemon ends with the chat (demo)
        self.client = client
        self.stream = stream
        self.model = ChatModel(client.client_id)
        self.model.status.branch = branch
        self._clock = clock
        self._ctrl_c = CtrlCPolicy()
        self._views: dict[int, BlockView] = {}
        self._prompt_screen: PermissionScreen | QuestionScreen | None = None
        self._pending = Changes()  # what changed since the last frame
        self._dirty = asyncio.Event()
        # Held, not queried: App.query_one searches the active screen, which is a prompt's
        # while one is open.
        self._status_bar = StatusBar(id="status")
        self._transcript = Transcript(id="transcript")
        self._lock_notice = LockNotice(id="lock-notice")
        self._input = PromptArea(
            id="prompt", placeholder="Message claude (Enter sends, ctrl+j new line, / commands)"
        )
        self._suggestions = Suggestions(id="suggestions")
        self._palette = Palette(client, lambda: self.stream.session_id, self._suggestions)

    def compose(self) -> ComposeResult:
        yield self._status_bar
        yield self._transcript
        yield self._lock_notice
        yield self._suggestions
        yield self._input
        yield Footer()

    def on_mount(self) -> None:
        self._status_bar.show(self.model.status)
        self._lock_notice.show(self.model.status)
        self._input.focus()
        # Follow the conversation's end as it grows, until the user scrolls up to read.
        self._transcript.anchor()
        self.run_worker(self._converse(), name="conversation", group="conversation")
        self.run_worker(self._draw_loop(), name="draw")
        self.set_interval(LOCK_REQUEST_CHECK_SECONDS, self._drop_lapsed_lock_requests)

    async def _converse(self) -> None:
        try:
            await self._load_history()
            async for item in self.stream.items():
                if isinstance(item, ConnectionChange):
                    self._changed(self.model.set_connection(describe_connection(item)))
                else:
                    self._changed(self.model.apply(item))
        except DaemonError as error:
            self.exit(return_code=error.exit_code, message=f"betcode chat: {error}")
            return
        self._changed(self.model.set_connection("the conversation stream has ended"))

    async def _load_history(self) -> None:
        changes = Changes()
        async for batch in self.stream.catch_up():
            for event in batch:
                changes.merge(self.model.apply(event))
        keys = list(changes.blocks)
        if len(keys) > MAX_HISTORY_VIEWS:
            note = f"… {len(keys) - MAX_HISTORY_VIEWS:,} earlier entries are not shown"
            await self._transcript.mount(Static(note, classes="notice"))
            changes.blocks = dict.fromkeys(keys[-MAX_HISTORY_VIEWS:])
        self._changed(changes)
        self._drop_lapsed_lock_requests()

    def _drop_lapsed_lock_requests(self) -> None:
        if self.model.lock_requests_waiting:
            self._changed(self.model.drop_lapsed_lock_requests(datetime.now(UTC)))

    # --- drawing -------------------------------------------------------------------------

    def _changed(self, changes: Changes) -> None:
        self._pending.merge(changes)
        self._dirty.set()

    async def _draw_loop(self) -> None:
        """The only place that draws: at most one frame per FRAME_SECONDS, however fast events
        come (a frame shows every change since the last one, text deltas joined)."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            changes, self._pending = self._pending, Changes()
            await self._draw(changes)
            await asyncio.sleep(FRAME_SECONDS)

    async def _draw(self, changes: Changes) -> None:
        new_views: list[BlockView] = []
        for key in changes.blocks:
            block = self.model.blocks[key]
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = view_for(block)
                new_views.append(view)
            else:
                await view.sync(block)
        if new_views:
            await self._transcript.mount_all(new_views)
        if changes.status:
            self._status_bar.show(self.model.status)
            self._lock_notice.show(self.model.status)
        if changes.prompts or changes.status:
            await self._sync_prompt()

    async def _sync_prompt(self) -> None:
        """Shows the first pending prompt, unless another client holds the input lock; closes a
        shown prompt once it was settled (here or elsewhere)."""
        wanted = None if self.model.status.read_only else self.model.active_prompt
        shown = self._prompt_screen
        if shown is not None and (wanted is None or shown.request_id != wanted.request_id):
            self._prompt_screen = None
            while shown in self.screen_stack:
                await self.pop_screen()
        if self._prompt_screen is not None or wanted is None:
            return
        if isinstance(wanted, PermissionPrompt):
            screen: PermissionScreen | QuestionScreen = PermissionScreen(wanted)
            callback: Any = partial(self._permission_answered, wanted.request_id)
        else:
            screen = QuestionScreen(wanted)
            callback = partial(self._question_answered, wanted.question_id)
        self._prompt_screen = screen
        await self.push_screen(screen, callback)

    # --- answers and keys ----------------------------------------------------------------

    async def _permission_answered(self, request_id: str, answer: PermissionAnswer) -> None:
        self._prompt_screen = None
        await self.stream.answer_permission(
            request_id, answer.decision, message=answer.message, updated_input=answer.updated_input
        )
        self._changed(self.model.answered(request_id, answer.updated_input))

    async def _question_answered(self, question_id: str, answers: dict[str, str] | None) -> None:
        self._prompt_screen = None
        if answers is None:
            await self.stream.answer_permission(question_id, DENY, message=QUESTION_DECLINED)
        else:
            await self.stream.answer_question(question_id, answers)
        self._changed(self.model.answered(question_id))

    def on_key(self, event: events.Key) -> None:
        """Typing goes to the message input wherever the focus was left on the main screen
        (Tab moves it to the transcript and the tool calls)."""
        main_screen = self.screen is self.screen_stack[0]
        if main_screen and event.is_printable and self.focused is not self._input:
            event.stop()
            self._input.focus()
            self._input.insert(event.character or "")

    def action_scroll_transcript(self, pages: int) -> None:
        if pages < 0:
            self._transcript.scroll_page_up(animate=False)
        else:
            self._transcript.scroll_page_down(animate=False)

    @on(PromptArea.Submitted)
    async def _submit(self, message: PromptArea.Submitted) -> None:
        text = message.text.strip()
        if not text:
            return
        status = self.model.status
        if status.read_only:
            self.notify(
                f"read-only: {status.lock_holder} has the input lock; "
                f"press {LOCK_REQUEST_KEY} to request it",
                severity="warning",
            )
            return
        command = chat_command(text)
        if command is not None:
            self._input.clear()
            await self._run_command(command)
            return
        await self.stream.send_message(text)
        self._changed(self.model.input_sent())
        self._input.clear()
        self._transcript.anchor()  # back to the end, where the answer will come

    async def action_interrupt(self) -> None:
        if self._ctrl_c.press(self._clock(), self.model.turn_running) is CtrlC.QUIT:
            await self.action_quit()
            return
        await self.stream.cancel_turn()
        self.notify("Cancelling the turn… press ctrl+c again to quit.")

    async def action_quit(self) -> None:
        session_id = self.stream.session_id
        goodbye = (
            f"Session {session_id} keeps running in the daemon; reattach with "
            f"`betcode chat --session {session_id}` or `betcode chat --continue`."
            if session_id and self.reattach_hint
            else None
        )
        self.exit(message=goodbye)

    def action_request_lock(self) -> None:
        session_id = self.stream.session_id
        if not session_id:
            self.notify("There is no session yet: send a message first.")
            return
        holder = self.model.status.lock_holder or "the holder"
        self.notify(f"Asked {holder} for the input lock; it moves to you unless they keep typing.")
        # The daemon answers once the holder had its say (seconds): the screen stays live.
        self.run_worker(self._request_lock(session_id), group="input-lock", exclusive=True)

    async def _request_lock(self, session_id: str) -> None:
        try:
            response = await self.client.request_input_lock(session_id)
        except DaemonError as error:
            self.notify(str(error), severity="error")
            return
        if response.granted:
            self._changed(self.model.lock_granted())
            self.notify("You have the input lock.")
        else:
            holder = self.model.holder_label(response.previous_holder or "the holder")
            self.notify(f"{holder} kept the input lock.", severity="warning")

    # --- the palette and the commands the chat runs itself --------------------------------

    @on(TextArea.Changed, "#prompt")
    def _prompt_changed(self) -> None:
        text = self._input.text
        cursor = offset_of(text, self._input.cursor_location)
        self.run_worker(self._complete(text, cursor), group="palette", exclusive=True)

    async def _complete(self, text: str, cursor: int) -> None:
        await self._palette.update(text, cursor)
        self._input.palette_open = self._palette.is_open

    @on(PromptArea.PaletteKey)
    def _palette_key(self, message: PromptArea.PaletteKey) -> None:
        if message.key == "tab":
            self._accept_suggestion()
        elif message.key == "escape":
            self._palette.close()
            self._input.palette_open = False
        else:
            self._palette.move(1 if message.key == "down" else -1)

    def _accept_suggestion(self) -> None:
        """Replaces the token with the highlighted suggestion; the input's change event then
        shows what follows (a folder's entries) or closes the list."""
        token, chosen = self._palette.token, self._palette.chosen
        if token is None or chosen is None:
            return
        text = self._input.text
        self._input.replace(
            chosen.insert, location_of(text, token.start), location_of(text, token.end)
        )

    async def _run_command(self, command: ChatCommand) -> None:
        if command.name == CLEAR:
            await self._start_fresh_session()
        elif command.name == COMPACT:
            await self._compact()
        elif command.name == MODEL:
            await self._switch_model(command.argument)
        else:
            self.run_worker(self._service_command(command), group="service-command")

    async def _start_fresh_session(self) -> None:
        """/clear: a new session in the same directory (with the same model); the old one
        keeps its history in the daemon."""
        previous = self.stream.session_id
        self.stream = ConversationStream(
            self.client,
            working_directory=self.stream.working_directory,
            model=self.stream.model,
        )
        self.model = ChatModel(self.client.client_id)
        self._views.clear()
        self._pending = Changes()
        await self._transcript.remove_children()
        self._status_bar.show(self.model.status)
        self._lock_notice.show(self.model.status)
        self.run_worker(self._converse(), name="conversation", group="conversation", exclusive=True)
        if previous:
            self.notify(f"Fresh session. The previous one stays: betcode chat --session {previous}")

    async def _compact(self) -> None:
        session_id = self.stream.session_id
        if not session_id:
            self.notify("Nothing to compact yet: send a message first.", severity="warning")
            return
        try:
            await self.client.compact_session(session_id)
        except DaemonError as error:
            self.notify(str(error), severity="error")
            return
        self.notify("Compacting the conversation…")

    async def _switch_model(self, name: str) -> None:
        if not name:
            self.notify("Usage: /model NAME, e.g. /model sonnet", severity="warning")
            return
        # claude switches itself (a local command in stream-json mode,
        # docs/PROTOCOL.md#slash-commands); a session this chat starts later (/clear) starts with
        # the model.
        self.stream.model = name
        await self.stream.send_message(f"/model {name}")
        self._changed(self.model.input_sent())

    async def _service_command(self, command: ChatCommand) -> None:
        try:
            outputs = await self.client.run_service_command(
                self.stream.session_id, command.name, command.argument.split()
            )
        except DaemonError as error:
            self.notify(str(error), severity="error")
            return
        lines = [
            getattr(output, kind)
            for output in outputs
            if (kind := output.WhichOneof("output")) not in (None, "exit_code")
        ]
        self._changed(self.model.add_notice("\n".join(lines) or f"/{command.name}: done"))
