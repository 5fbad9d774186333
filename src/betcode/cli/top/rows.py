"""One row per session, from the daemon's SessionsOverview, its worktrees and its subagents:
what the board and `--json` show. A subagent's session comes right after its parent's (and
its own subagents after it), `depth` deep."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from betcode.v1 import agent_pb2, common_pb2, monitor_pb2, worktree_pb2

RESTING = frozenset({"idle", "completed", "error", "unknown"})  # states of a session at rest


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    name: str
    # The live agent status (idle, thinking, ...) when loaded, else the stored one; at rest,
    # "queued (N of M)" or "waiting: cost limit" while the daemon holds its message back.
    state: str
    model: str
    where: str  # "worktree NAME (branch B)", else the working directory
    clients: int
    pending_approvals: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cost_per_hour_usd: float  # over the last 10 minutes
    claude_rss_mb: float  # its claude's process tree; 0 when none runs
    over_rss_limit: bool  # busy above daemon.limits.session_rss_mb
    worktree: str = ""  # the worktree's name
    branch: str = ""
    parent_session_id: str = ""  # set for a subagent's session
    depth: int = 0  # subagent nesting under the parent shown above it
    live: bool = field(default=False)  # working, waited on, attached to, or its claude runs

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def session_rows(
    overview: monitor_pb2.SessionsOverview,
    worktrees: Mapping[str, worktree_pb2.WorktreeDetail] | None = None,
    parents: Mapping[str, str] | None = None,
) -> list[SessionRow]:
    """Every session's row; `worktrees` by id, `parents`: a subagent's session → its parent's."""
    rows = [_row(item, worktrees or {}, parents or {}) for item in overview.sessions]
    return _nested(rows)


def live_rows(rows: list[SessionRow]) -> list[SessionRow]:
    """The live sessions, with the parents of live subagents (so they nest), in order."""
    keep = {row.session_id for row in rows if row.live}
    by_id = {row.session_id: row for row in rows}
    for session_id in list(keep):
        parent = by_id[session_id].parent_session_id
        while parent in by_id and parent not in keep:
            keep.add(parent)
            parent = by_id[parent].parent_session_id
    return [row for row in rows if row.session_id in keep]


def _nested(rows: list[SessionRow]) -> list[SessionRow]:
    by_id = {row.session_id: row for row in rows}
    children: dict[str, list[SessionRow]] = {}
    for row in rows:
        if row.parent_session_id in by_id:
            children.setdefault(row.parent_session_id, []).append(row)
    ordered: list[SessionRow] = []

    def place(row: SessionRow, depth: int) -> None:
        ordered.append(_at_depth(row, depth))
        for child in children.get(row.session_id, []):
            place(child, depth + 1)

    for row in rows:
        if row.parent_session_id not in by_id:
            place(row, 0)
    return ordered


def _at_depth(row: SessionRow, depth: int) -> SessionRow:
    return row if row.depth == depth else SessionRow(**{**asdict(row), "depth": depth})


def _row(
    item: monitor_pb2.SessionOverview,
    worktrees: Mapping[str, worktree_pb2.WorktreeDetail],
    parents: Mapping[str, str],
) -> SessionRow:
    summary = item.summary
    worktree = worktrees.get(summary.worktree_id)
    state = _state(item)
    return SessionRow(
        session_id=summary.id,
        name=summary.name,
        state=state,
        model=summary.model,
        where=f"worktree {worktree.name} ({worktree.branch})"
        if worktree
        else summary.working_directory,
        clients=item.clients_attached,
        pending_approvals=item.pending_permissions,
        input_tokens=summary.total_input_tokens,
        output_tokens=summary.total_output_tokens,
        cost_usd=summary.total_cost_usd,
        cost_per_hour_usd=item.cost_per_hour_usd,
        claude_rss_mb=summary.claude_rss_bytes / (1024 * 1024),
        over_rss_limit=summary.over_rss_limit,
        worktree=worktree.name if worktree else "",
        branch=worktree.branch if worktree else "",
        parent_session_id=parents.get(summary.id, ""),
        live=bool(
            item.clients_attached
            or item.pending_permissions
            or summary.claude_rss_bytes
            or state not in RESTING
        ),
    )


def _state(item: monitor_pb2.SessionOverview) -> str:
    if item.loaded and item.agent_status != common_pb2.AGENT_STATUS_UNSPECIFIED:
        name = common_pb2.AgentStatus.Name(item.agent_status)
        return held_state(item.summary, name.removeprefix("AGENT_STATUS_").lower())
    return held_state(item.summary, item.summary.status or "unknown")


def held_state(summary: agent_pb2.SessionSummary, state: str) -> str:
    """A session at rest whose message the daemon holds back says so (claude's own status
    stays idle then): it waits for a turn slot, or on a cost request (docs/LIMITS.md)."""
    if state not in RESTING:
        return state  # its turn runs; what waits comes after
    if summary.queue_position:
        return f"queued ({summary.queue_position} of {summary.queue_length})"
    if summary.waiting_cost_limit:
        return "waiting: cost limit"
    return state


def totals(rows: list[SessionRow]) -> str:
    """The header line: sessions, clients, approvals waiting, spend."""
    cost = sum(row.cost_usd for row in rows)
    rate = sum(row.cost_per_hour_usd for row in rows)
    waiting = sum(row.pending_approvals for row in rows)
    clients = sum(row.clients for row in rows)
    return (
        f"{_counted(len(rows), 'session')} · {_counted(clients, 'client')} · "
        f"{_counted(waiting, 'approval')} waiting · ${cost:.4f} so far · "
        f"${rate:.4f}/h (last 10 min)"
    )


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def memory_text(rss_mb: float, over_limit: bool) -> str:
    """A session's claude memory: "-" when none runs, "!" when above the limit while busy."""
    if not rss_mb:
        return "-"
    return f"{rss_mb:.0f} MB" + (" (over limit)" if over_limit else "")
