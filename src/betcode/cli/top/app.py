"""The live table: refreshed from the daemon every `interval` seconds; q quits.

A refresh that fails (the daemon stopped, restarting) is shown in the status line and tried
again at the next tick; the table keeps the last answer meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static

from betcode.cli.connection import DaemonError
from betcode.cli.top.rows import SessionRow, memory_text, session_rows, totals
from betcode.v1 import monitor_pb2

Fetch = Callable[[], Awaitable[monitor_pb2.SessionsOverview]]
COLUMNS = ("session", "state", "model", "where", "clients", "approvals", "tokens in/out",
           "cost", "cost/h", "memory")  # fmt: skip


class TopApp(App[None]):
    TITLE = "betcode top"
    BINDINGS = [Binding("q", "quit", "quit")]  # noqa: RUF012 - Textual's declaration style

    def __init__(self, fetch: Fetch, interval: float = 2.0) -> None:
        super().__init__()
        self._fetch = fetch
        self._interval = interval
        self.rows: list[SessionRow] = []

    def compose(self) -> ComposeResult:
        yield Static("connecting…", id="summary")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        await self.refresh_sessions()
        self.set_interval(self._interval, self.refresh_sessions)

    async def refresh_sessions(self) -> None:
        status = self.query_one("#summary", Static)
        try:
            overview = await self._fetch()
        except DaemonError as error:
            status.update(f"daemon not answering: {error}")
            return
        self.rows = session_rows(overview)
        status.update(totals(self.rows))
        table = self.query_one(DataTable)
        table.clear()
        for row in self.rows:
            table.add_row(*_cells(row), key=row.session_id)


def _cells(row: SessionRow) -> tuple[str, ...]:
    label = row.session_id[:8] + (f" {row.name}" if row.name else "")
    return (
        label,
        row.state,
        row.model or "-",
        row.where,
        str(row.clients),
        str(row.pending_approvals),
        f"{row.input_tokens}/{row.output_tokens}",
        f"${row.cost_usd:.4f}",
        f"${row.cost_per_hour_usd:.4f}",
        memory_text(row.claude_rss_mb, row.over_rss_limit),
    )
