"""Which requests a re-attaching daemon decides again (permissions.unanswered)."""

from __future__ import annotations

import json

from betcode.devtools.fake_claude_messages import can_use_tool
from betcode.permissions.unanswered import unanswered_requests
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool


def asked(request_id: str) -> tuple[str, bytes]:
    line = can_use_tool(request_id, "Bash", {"command": "ls"}, f"toolu_{request_id}")
    return "out", json.dumps(line).encode()


def test_only_requests_with_no_answer_logged_no_withdrawal_and_no_pending_row() -> None:
    lines = [
        asked("answered"),
        ("in", stdin.permission_allow("answered").rstrip(b"\n")),
        asked("withdrawn"),
        ("out", json.dumps({"type": "control_cancel_request", "request_id": "withdrawn"}).encode()),
        asked("stored"),
        asked("left"),
        ("in", stdin.interrupt().rstrip(b"\n")),  # a control line of the daemon's, no answer
    ]

    [left] = unanswered_requests(lines, stored={"stored"})

    assert left.request_id == "left"
    assert isinstance(left.request, CanUseTool)
    assert left.request.input == {"command": "ls"}
