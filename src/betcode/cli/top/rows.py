"""One row per session, from the daemon's SessionsOverview: what the table and `--json` show."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from betcode.v1 import common_pb2, monitor_pb2


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    name: str
    state: str  # the live agent status (idle, thinking, ...) when loaded, else the stored one
    model: str
    where: str  # the worktree id, else the working directory
    clients: int
    pending_approvals: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cost_per_hour_usd: float  # over the last 10 minutes
    claude_rss_mb: float  # its claude's process tree; 0 when none runs
    over_rss_limit: bool  # busy above daemon.limits.session_rss_mb

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def session_rows(overview: monitor_pb2.SessionsOverview) -> list[SessionRow]:
    return [_row(item) for item in overview.sessions]


def _row(item: monitor_pb2.SessionOverview) -> SessionRow:
    summary = item.summary
    return SessionRow(
        session_id=summary.id,
        name=summary.name,
        state=_state(item),
        model=summary.model,
        where=summary.worktree_id or summary.working_directory,
        clients=item.clients_attached,
        pending_approvals=item.pending_permissions,
        input_tokens=summary.total_input_tokens,
        output_tokens=summary.total_output_tokens,
        cost_usd=summary.total_cost_usd,
        cost_per_hour_usd=item.cost_per_hour_usd,
        claude_rss_mb=summary.claude_rss_bytes / (1024 * 1024),
        over_rss_limit=summary.over_rss_limit,
    )


def _state(item: monitor_pb2.SessionOverview) -> str:
    if item.loaded and item.agent_status != common_pb2.AGENT_STATUS_UNSPECIFIED:
        name = common_pb2.AgentStatus.Name(item.agent_status)
        return name.removeprefix("AGENT_STATUS_").lower()
    return item.summary.status or "unknown"


def totals(rows: list[SessionRow]) -> str:
    """The header line: sessions, clients, approvals waiting, spend."""
    cost = sum(row.cost_usd for row in rows)
    rate = sum(row.cost_per_hour_usd for row in rows)
    waiting = sum(row.pending_approvals for row in rows)
    clients = sum(row.clients for row in rows)
    return (
        f"{len(rows)} sessions · {clients} clients · {waiting} approvals waiting · "
        f"${cost:.4f} so far · ${rate:.4f}/h (last 10 min)"
    )


def memory_text(rss_mb: float, over_limit: bool) -> str:
    """A session's claude memory: "-" when none runs, "!" when above the limit while busy."""
    if not rss_mb:
        return "-"
    return f"{rss_mb:.0f} MB" + (" (over limit)" if over_limit else "")
