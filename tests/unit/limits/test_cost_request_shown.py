"""How a stored cost request is shown where tool approvals are: the web client's waiting list."""

from __future__ import annotations

import json

from betcode.permissions.cost_requests import COST_LIMIT_TOOL, CapReached, usd
from betcode.storage.pending import PendingPermission
from betcode.web.api import _waiting_json


def row(tool_name: str, tool_input: dict[str, object]) -> PendingPermission:
    return PendingPermission(
        "r1", "s1", tool_name, "why", json.dumps(tool_input), None, "stream_json", False,
        1.0, None, 2.0, None, 0, False, False, None, False, None, None, None, False,
    )  # fmt: skip


def test_a_cost_request_adds_no_session_rule_where_a_tool_call_does() -> None:
    cost = _waiting_json(row(COST_LIMIT_TOOL, {"message": "go on", "limit_usd": 2.0}))
    bash = _waiting_json(row("Bash", {"command": "ls"}))
    assert cost["session_rule"] is None
    assert bash["session_rule"] == "Bash(ls)"


def test_the_question_names_the_session_the_spend_and_the_step() -> None:
    own = CapReached("session", 2.07, 2.0, 2.0, "2026-11-28").question("s1")
    assert own == "session s1 has spent $2.07 of its $2.00 limit; allow another $2.00?"
    day = CapReached("day", 0.5, 0.25, 0.25, "2026-11-28").question("s1")
    assert day == (
        "the sessions have spent $0.5 of the $0.25 limit for 2026-11-28; allow session s1 "
        "another $0.25 today?"
    )
    assert (usd(1234.5), usd(0.000001), usd(0)) == ("$1,234.50", "$0.000001", "$0")
