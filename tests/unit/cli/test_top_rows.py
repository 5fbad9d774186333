"""The board's rows (`top/rows.py`): subagents' sessions nested under their parents, a
worktree's name and branch as the place, and which sessions are live."""

from __future__ import annotations

from betcode.cli.top.rows import live_rows, session_rows, totals
from betcode.v1 import agent_pb2, common_pb2, monitor_pb2, worktree_pb2


def overview(*items: monitor_pb2.SessionOverview) -> monitor_pb2.SessionsOverview:
    return monitor_pb2.SessionsOverview(sessions=items)


def item(session_id: str, *, clients: int = 0, worktree: str = "") -> monitor_pb2.SessionOverview:
    summary = agent_pb2.SessionSummary(
        id=session_id, status="idle", working_directory=f"/w/{session_id}", worktree_id=worktree
    )
    return monitor_pb2.SessionOverview(
        summary=summary, loaded=True, agent_status=common_pb2.AGENT_STATUS_IDLE,
        clients_attached=clients,
    )  # fmt: skip


def test_subagents_nest_under_their_parents_and_worktrees_show_name_and_branch() -> None:
    worktrees = {"wt1": worktree_pb2.WorktreeDetail(id="wt1", name="fix-login", branch="fix")}
    rows = session_rows(
        overview(item("grandchild"), item("other"), item("child", worktree="wt1"), item("top")),
        worktrees,
        {"child": "top", "grandchild": "child"},
    )
    assert [(row.session_id, row.depth) for row in rows] == [
        ("other", 0),
        ("top", 0),
        ("child", 1),
        ("grandchild", 2),
    ]
    child = rows[2]
    assert (child.where, child.worktree, child.branch) == (
        "worktree fix-login (fix)",
        "fix-login",
        "fix",
    )
    assert rows[0].where == "/w/other"


def test_live_rows_keep_a_live_subagents_parents() -> None:
    rows = session_rows(
        overview(item("top"), item("child"), item("grandchild", clients=1), item("resting")),
        parents={"child": "top", "grandchild": "child"},
    )
    assert [row.session_id for row in live_rows(rows)] == ["top", "child", "grandchild"]
    assert [row.live for row in rows] == [False, False, True, False]


def test_the_totals_line_counts_in_words() -> None:
    one = session_rows(overview(item("only", clients=1)), {}, {})
    assert totals(one).startswith("1 session · 1 client · 0 approvals waiting · $0.0000 so far")
    two = session_rows(overview(item("a"), item("b", clients=2)), {}, {})
    assert totals(two).startswith("2 sessions · 2 clients · 0 approvals waiting")


def test_a_session_at_rest_shows_the_message_the_daemon_holds_back() -> None:
    queued, at_cap, busy, stored = item("queued"), item("at-cap"), item("busy"), item("stored")
    queued.summary.queue_position, queued.summary.queue_length = 2, 3
    at_cap.summary.waiting_cost_limit = True
    busy.agent_status = common_pb2.AGENT_STATUS_THINKING  # its turn runs; its next one waits
    busy.summary.queue_position, busy.summary.queue_length = 1, 3
    stored.loaded, stored.agent_status = False, common_pb2.AGENT_STATUS_UNSPECIFIED
    stored.summary.queue_position, stored.summary.queue_length = 3, 3
    rows = session_rows(overview(queued, at_cap, busy, stored))
    assert {row.session_id: (row.state, row.live) for row in rows} == {
        "queued": ("queued (2 of 3)", True),
        "at-cap": ("waiting: cost limit", True),
        "busy": ("thinking", True),
        "stored": ("queued (3 of 3)", True),
    }
