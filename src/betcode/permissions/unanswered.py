"""The requests a re-attached claude may still wait on with no answer on its way.

An automatic answer (a rule, a grant, a delegation) is recorded only as the line written to
claude, and that line is logged before its stdin journal entry is committed (one writer, in
order). A daemon killed after claude's request was committed but before that line was logged
(or while a delegated call waited on its rate limit) left a request nobody will answer: no
answer is logged or journaled for it, and no pending row shows it to the users. A request
counts as answered once an answer to it was logged (sent again on re-attach, see
`SessionManager.adopt`), once claude withdrew it, or once it was stored as pending.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from betcode.protocol.messages import ControlCancelRequest, ControlRequest
from betcode.protocol.reader import ProtocolReader
from betcode.protocol.writer import answered_request_id
from betcode.sessions.session import Session


@dataclass(frozen=True, slots=True)
class LeftUnanswered:
    """A re-attached session's requests to decide again, and the pid of the claude that asked."""

    session: Session
    asker: int | None
    requests: list[ControlRequest]


def unanswered_requests(
    control_lines: Sequence[tuple[str, bytes]], stored: Collection[str]
) -> list[ControlRequest]:
    """claude's requests among `control_lines` (storage.pending.control_lines_since) with
    neither an answer logged nor a withdrawal, and not among the `stored` request ids."""
    reader = ProtocolReader()
    asked: dict[str, ControlRequest] = {}
    settled = set(stored)
    for direction, line in control_lines:
        if direction == "in":
            answered = answered_request_id(line)
            if answered is not None:
                settled.add(answered)
            continue
        message = reader.decode(line)
        if isinstance(message, ControlRequest):
            asked[message.request_id] = message
        elif isinstance(message, ControlCancelRequest):
            settled.add(message.request_id)
    return [request for request_id, request in asked.items() if request_id not in settled]
