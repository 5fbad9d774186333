"""What the bridge writes to claude for a decision: pure functions of the request and answer.

A client's answer to a pending request (`build_reply`), an expiry (`expiry_reply`) and the
bridge's own automatic decisions each become exactly one control_response line, in the NDJSON
dialect the request came in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from betcode.permissions.grants import SessionGrant, grant_from_request
from betcode.protocol import writer as stdin
from betcode.protocol.messages import Dialect
from betcode.storage.pending import PendingPermission
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
DEFAULT_DENY_MESSAGE = "The user denied this tool use."
EXPIRED = "expired"
# response_decision values that let the tool run (a question's answers included).
ALLOWING_DECISIONS = frozenset({"allow_once", "allow_session", "allow_with_edit"})


class AnswerError(Exception):
    """An answer that cannot be applied; `code` is a DIGEST §11.3 application error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def not_found(cls, request_id: str) -> AnswerError:
        return cls("PERMISSION_NOT_FOUND", f"no pending permission request with id {request_id!r}")

    @classmethod
    def stale(cls, request_id: str) -> AnswerError:
        return cls("PERMISSION_STALE", f"permission request {request_id!r} has expired")

    @classmethod
    def invalid(cls, message: str) -> AnswerError:
        return cls("INVALID_ARGUMENT", message)


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    request_id: str
    decision: int = Decision.PERMISSION_DECISION_UNSPECIFIED
    updated_input: dict[str, Any] | None = None
    message: str = ""
    answers: dict[str, str] = field(default_factory=dict)
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    accepted: bool
    duplicate: bool
    outcome: str


@dataclass(frozen=True, slots=True)
class Reply:
    decision: str  # stored in pending_permissions.response_decision
    outcome: str  # allowed | denied | answered | expired (shown to clients)
    line: bytes  # the control_response for claude
    grant: SessionGrant | None = None  # ALLOW_SESSION: the grant to store
    message: str = ""  # the deny text the model receives

    @property
    def allows(self) -> bool:
        return self.decision in ALLOWING_DECISIONS


def build_reply(
    row: PendingPermission, answer: ClientAnswer, suggestions: Sequence[object] = ()
) -> Reply:
    """The reply to a client's answer. `suggestions` are claude's permission_suggestions for
    the request (known while the process that asked is alive); they scope ALLOW_SESSION."""
    dialect = Dialect(row.dialect)
    original: dict[str, Any] = json.loads(row.input)
    decision = answer.decision
    if (
        row.is_question
        and answer.answers
        and decision
        in (
            Decision.PERMISSION_DECISION_UNSPECIFIED,
            Decision.PERMISSION_DECISION_ALLOW_ONCE,
        )
    ):
        line = stdin.question_answers(row.request_id, original, answer.answers, dialect=dialect)
        return Reply("answered", "answered", line)
    if decision == Decision.PERMISSION_DECISION_ALLOW_ONCE:
        line = stdin.permission_allow(row.request_id, dialect=dialect)
        return Reply("allow_once", "allowed", line)
    if decision == Decision.PERMISSION_DECISION_ALLOW_SESSION:
        line = stdin.permission_allow(row.request_id, dialect=dialect)
        grant = grant_from_request(row.tool_name, original, suggestions)
        return Reply("allow_session", "allowed", line, grant)
    if decision == Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT:
        if answer.updated_input is None:
            raise AnswerError.invalid("ALLOW_WITH_EDIT needs updated_input")
        line = stdin.permission_allow(
            row.request_id, updated_input=answer.updated_input, dialect=dialect
        )
        return Reply("allow_with_edit", "allowed", line)
    deny_message = answer.message.strip() or DEFAULT_DENY_MESSAGE
    if decision in (
        Decision.PERMISSION_DECISION_DENY,
        Decision.PERMISSION_DECISION_DENY_NO_INTERRUPT,
    ):
        line = stdin.permission_deny(row.request_id, deny_message, dialect=dialect)
        return Reply("deny", "denied", line, message=deny_message)
    if decision == Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT:
        line = stdin.permission_deny(row.request_id, deny_message, interrupt=True, dialect=dialect)
        return Reply("deny_interrupt", "denied", line, message=deny_message)
    if row.is_question:
        raise AnswerError.invalid("a question needs answers (question text → answer) or a deny")
    raise AnswerError.invalid(f"unknown permission decision {decision}")


def expiry_reply(row: PendingPermission, ttl_seconds: float) -> Reply:
    """The soft deny of a request nobody answered in time (the seed's wording)."""
    message = (
        f"Permission request expired after {format_ttl(ttl_seconds)}. User can retry the operation."
    )
    line = stdin.permission_deny(row.request_id, message, dialect=Dialect(row.dialect))
    return Reply(EXPIRED, EXPIRED, line, message=message)


def outcome_of(decision: str | None) -> str:
    """The outcome clients are shown for a stored response_decision."""
    if decision in ALLOWING_DECISIONS:
        return "allowed"
    if decision in ("deny", "deny_interrupt"):
        return "denied"
    return decision or ""


_UNITS = (("day", 86_400), ("hour", 3600), ("minute", 60))


def format_ttl(seconds: float) -> str:
    """A duration in the largest unit that divides it exactly: "7 days", "90 minutes",
    "1 hour", "2 seconds", "0.5 seconds"."""
    for name, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {name}{'' if count == 1 else 's'}"
    return f"{seconds:g} second{'' if seconds == 1 else 's'}"
