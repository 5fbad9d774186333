"""The task board: the live sessions (every one with `a`ll), refreshed every `interval`
seconds, with keys to act on the selected one.

enter opens its chat (the board closes and `betcode top` runs the chat), y allows and n denies
its oldest waiting request, c cancels its turn, x twice deletes it, / filters by name, id or
place, a shows every session or only the live ones, q quits. A refresh that fails (the daemon
stopped, restarting) is shown in the status line and tried again at the next tick; the table
keeps the last answer meanwhile.
"""

from __future__ import annotations

from typing import Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Static

from betcode.cli.connection import DaemonError
from betcode.cli.top.rows import SessionRow, live_rows, memory_text, totals

COLUMNS = ("session", "state", "where", "approvals", "clients", "model", "tokens in/out",
           "cost", "cost/h", "memory")  # fmt: skip


class Board(Protocol):
    async def rows(self) -> list[SessionRow]: ...
    async def answer_oldest(self, session_id: str, *, allow: bool) -> str: ...
    async def cancel_turn(self, session_id: str) -> str: ...
    async def delete(self, session_id: str) -> str: ...


class TopApp(App[str]):
    """Returns the id of the session to open in the chat, if one was chosen (enter)."""

    TITLE = "betcode top"
    CSS = "#filter { display: none; } #filter.shown { display: block; }"
    BINDINGS = [  # noqa: RUF012 - Textual's declaration style
        Binding("enter", "open", "chat"),
        Binding("y", "answer(True)", "allow"),
        Binding("n", "answer(False)", "deny"),
        Binding("c", "cancel_turn", "cancel turn"),
        Binding("x", "delete", "delete"),
        Binding("slash", "filter", "filter"),
        Binding("a", "toggle_all", "all/live"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, board: Board, interval: float = 2.0, *, show_all: bool = False) -> None:
        super().__init__()
        self._board = board
        self._interval = interval
        self.show_all = show_all
        self.rows: list[SessionRow] = []  # every session, as last fetched
        self.shown: list[SessionRow] = []  # the table's rows, in order
        self.filter = ""
        self._delete_armed = ""  # the session a first x asked to delete

    def compose(self) -> ComposeResult:
        yield Static("connecting…", id="summary")
        yield Input(placeholder="filter: name, id, worktree or directory", id="filter")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Static("", id="status")
        yield Footer()

    async def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        table.focus()  # the keys act on its selected row; the filter field takes focus on /
        await self.refresh_sessions()
        self.set_interval(self._interval, self.refresh_sessions)

    async def refresh_sessions(self) -> None:
        summary = self.query_one("#summary", Static)
        try:
            self.rows = await self._board.rows()
        except DaemonError as error:
            summary.update(f"daemon not answering: {error}")
            return
        self._render_rows()

    def _render_rows(self) -> None:
        rows = self.rows if self.show_all else live_rows(self.rows)
        wanted = self.filter.casefold()
        self.shown = [row for row in rows if not wanted or wanted in _searchable(row)]
        scope = "all sessions" if self.show_all else "live sessions (a: all)"
        self.query_one("#summary", Static).update(f"{scope} · {totals(self.rows)}")
        table = self.query_one(DataTable)
        selected = self.selected()
        table.clear()
        for row in self.shown:
            table.add_row(*_cells(row), key=row.session_id)
        keys = [row.session_id for row in self.shown]
        if selected is not None and selected.session_id in keys:
            table.move_cursor(row=keys.index(selected.session_id))

    def selected(self) -> SessionRow | None:
        table = self.query_one(DataTable)
        if not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def _say(self, text: str) -> None:
        self.query_one("#status", Static).update(text)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()  # enter on the table

    def action_open(self) -> None:
        row = self.selected()
        if row is not None:
            self.exit(row.session_id)

    async def action_answer(self, allow: bool) -> None:
        await self._act(lambda session_id: self._board.answer_oldest(session_id, allow=allow))

    async def action_cancel_turn(self) -> None:
        await self._act(self._board.cancel_turn)

    async def action_delete(self) -> None:
        row = self.selected()
        if row is None:
            return
        if self._delete_armed != row.session_id:
            self._delete_armed = row.session_id
            self._say(f"press x again to delete {row.session_id[:8]} and its whole history")
            return
        self._delete_armed = ""
        await self._act(self._board.delete)

    async def _act(self, action: _Action) -> None:
        row = self.selected()
        if row is None:
            return
        try:
            self._say(await action(row.session_id))
        except DaemonError as error:
            self._say(f"error: {error}")
        await self.refresh_sessions()

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.add_class("shown")
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value
        self._render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.remove_class("shown")
        self.query_one(DataTable).focus()

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all
        self._render_rows()


class _Action(Protocol):
    async def __call__(self, session_id: str) -> str: ...


def _searchable(row: SessionRow) -> str:
    return f"{row.session_id} {row.name} {row.where}".casefold()


def _cells(row: SessionRow) -> tuple[str, ...]:
    indent = "  " * (row.depth - 1) + "└ " if row.depth else ""
    label = indent + row.session_id[:8] + (f" {row.name}" if row.name else "")
    return (
        label,
        row.state,
        row.where,
        str(row.pending_approvals or "-"),
        str(row.clients),
        row.model or "-",
        f"{row.input_tokens}/{row.output_tokens}",
        f"${row.cost_usd:.4f}",
        f"${row.cost_per_hour_usd:.4f}",
        memory_text(row.claude_rss_mb, row.over_rss_limit),
    )
