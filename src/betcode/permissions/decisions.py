"""A client's answer to a pending request → the exact line claude must receive (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from betcode.protocol import writer as stdin
from betcode.protocol.messages import Dialect
from betcode.storage.pending import PendingPermission
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
DEFAULT_DENY_MESSAGE = "The user denied this tool use."


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
class SessionGrantSpec:
    tool_name: str
    pattern: str | None


@dataclass(frozen=True, slots=True)
class Reply:
    decision: str  # stored in pending_permissions.response_decision
    outcome: str  # allowed | denied | answered (shown to clients)
    line: bytes  # the control_response for claude
    grant: SessionGrantSpec | None = None


def build_reply(row: PendingPermission, answer: ClientAnswer) -> Reply:
    dialect = Dialect(row.dialect)
    original: dict[str, Any] = json.loads(row.input)
    deny_message = answer.message.strip() or DEFAULT_DENY_MESSAGE
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
        return Reply(
            "allow_once", "allowed", stdin.permission_allow(row.request_id, dialect=dialect)
        )
    if decision == Decision.PERMISSION_DECISION_ALLOW_SESSION:
        line = stdin.permission_allow(row.request_id, dialect=dialect)
        return Reply("allow_session", "allowed", line, session_grant_for(row.tool_name, original))
    if decision == Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT:
        if answer.updated_input is None:
            raise AnswerError.invalid("ALLOW_WITH_EDIT needs updated_input")
        line = stdin.permission_allow(
            row.request_id, updated_input=answer.updated_input, dialect=dialect
        )
        return Reply("allow_with_edit", "allowed", line)
    if decision in (
        Decision.PERMISSION_DECISION_DENY,
        Decision.PERMISSION_DECISION_DENY_NO_INTERRUPT,
    ):
        line = stdin.permission_deny(row.request_id, deny_message, dialect=dialect)
        return Reply("deny", "denied", line)
    if decision == Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT:
        line = stdin.permission_deny(row.request_id, deny_message, interrupt=True, dialect=dialect)
        return Reply("deny_interrupt", "denied", line)
    if row.is_question:
        raise AnswerError.invalid("a question needs answers (question text → answer) or a deny")
    raise AnswerError.invalid(f"unknown permission decision {decision}")


def session_grant_for(tool_name: str, tool_input: dict[str, Any]) -> SessionGrantSpec:
    """ALLOW_SESSION is scoped like the rule Claude Code itself would suggest for this call."""
    if tool_name == "Bash" and isinstance(tool_input.get("command"), str):
        return SessionGrantSpec(tool_name, tool_input["command"].strip())
    return SessionGrantSpec(tool_name, None)
