"""What the bridge writes to claude for a decision: pure functions of the request and answer.

A client's answer to a pending request (`build_reply`), an expiry (`expiry_reply`) and the
bridge's own automatic decisions each become exactly one control_response line, in the NDJSON
dialect the request came in, and one audit event (`answer_audit`, `expiry_audit`,
`auto_audit`): permission_grant / permission_deny by the user, permission_deny with outcome
timeout by the sweeper, auto_approve_tool_call / permission_deny by the rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from betcode.permissions.grants import SessionGrant, grant_from_request
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool, Dialect
from betcode.storage.audit import AuditEvent, input_hash
from betcode.storage.pending import PendingPermission
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
DEFAULT_DENY_MESSAGE = "The user denied this tool use."
EXPIRED = "expired"
# response_decision values that let the tool run (a question's answers included).
ALLOWING_DECISIONS = frozenset({"allow_once", "allow_session", "allow_with_edit"})
DENYING_DECISIONS = frozenset({"deny", "deny_interrupt", EXPIRED})
# Audit actors that are not a client: the rule engine and the expiry sweep.
RULES_ACTOR = "permission-rules"
SWEEPER_ACTOR = "permission-sweeper"
UNKNOWN_CLIENT = "unknown-client"


class AnswerError(Exception):
    """An answer that cannot be applied; `code` is an application error code
    (docs/GRPC.md#error-codes)."""

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
    via: str = ""  # how the answer reached the daemon when not directly ("relay"): audited


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
    the request (stored with it); they scope ALLOW_SESSION."""
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


def answer_audit(row: PendingPermission, reply: Reply, answer: ClientAnswer) -> AuditEvent:
    """The audit event of a client's answer: a grant (allow, allow for the session, allow with
    an edit, a question answered) or a deny."""
    granted = reply.decision not in DENYING_DECISIONS
    context = {"request_id": row.request_id, "decision": reply.decision}
    if reply.grant is not None:
        context["session_grant"] = reply.grant.rule_text
    if answer.updated_input is not None and reply.decision == "allow_with_edit":
        context["edited_input_hash"] = input_hash(answer.updated_input)
    if reply.message:
        context["message"] = reply.message
    if answer.via:
        context["via"] = answer.via
    return AuditEvent(
        event_type="permission_grant" if granted else "permission_deny",
        actor_type="user",
        actor_id=answer.client_id or UNKNOWN_CLIENT,
        outcome="success" if granted else "denied",
        session_id=row.session_id,
        tool_name=row.tool_name,
        tool_input=stored_input(row),
        context=context,
    )


def expiry_audit(row: PendingPermission, reply: Reply) -> AuditEvent:
    """The audit event of a request nobody answered in time: a deny by timeout."""
    return AuditEvent(
        event_type="permission_deny",
        actor_type="system",
        actor_id=SWEEPER_ACTOR,
        outcome="timeout",
        severity="warn",
        session_id=row.session_id,
        tool_name=row.tool_name,
        tool_input=stored_input(row),
        error_code="PERMISSION_TIMEOUT",
        error_message=reply.message,
        context={"request_id": row.request_id, "decision": reply.decision},
    )


def auto_audit(
    session_id: str, request_id: str, tool: CanUseTool, allowed: bool, reason: str
) -> AuditEvent:
    """The audit event of a decision nobody was asked for: a rule (or session grant, or an
    approval given earlier) allowed or denied the call; `reason` says which."""
    return AuditEvent(
        event_type="auto_approve_tool_call" if allowed else "permission_deny",
        actor_type="daemon",
        actor_id=RULES_ACTOR,
        outcome="success" if allowed else "denied",
        session_id=session_id,
        tool_name=tool.tool_name,
        tool_input=tool.input,
        context={"request_id": request_id, "reason": reason},
    )


def stored_input(row: PendingPermission) -> Mapping[str, Any]:
    """The request's tool input as claude sent it (an input that is not an object is wrapped,
    so it is still hashed and previewed)."""
    value = json.loads(row.input)
    return value if isinstance(value, dict) else {"input": value}


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
