"""The audit events of a subagent's life (spawn, complete, fail, cancel, revoke, and each
question of it withdrawn when it ended): pure.

Each names the subagent, its session and its parent session; the actor is the client that
asked (a user) or, for what the daemon does on its own, the subagent manager.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from betcode.permissions.decisions import stored_input
from betcode.permissions.withdrawals import CANCELLED
from betcode.storage import subagents as rows
from betcode.storage.audit import AuditEvent, EventType
from betcode.storage.audit import Outcome as AuditOutcome
from betcode.storage.pending import PendingPermission

DAEMON_ACTOR = "subagent-manager"


def subagent_audit(
    event_type: EventType,
    row: rows.SubagentRow,
    outcome: AuditOutcome,
    *,
    actor: str | None = None,
    error: str = "",
    context: Mapping[str, str] | None = None,
    tool_name: str | None = None,
    tool_input: Mapping[str, Any] | None = None,
) -> AuditEvent:
    return AuditEvent(
        event_type=event_type,
        actor_type="user" if actor else "daemon",
        actor_id=actor or DAEMON_ACTOR,
        outcome=outcome,
        session_id=row.session_id,
        subagent_id=row.id,
        parent_session_id=row.parent_session_id,
        error_message=error or None,
        context=dict(context or {}),
        tool_name=tool_name,
        tool_input=tool_input,
    )


def withdrawn_request_audit(
    row: rows.SubagentRow, request: PendingPermission, reason: str, actor: str | None
) -> AuditEvent:
    """A question of the subagent that nobody answered before its run ended: denied (its call
    never ran), by whoever cancelled it, or by the daemon when it ended on its own."""
    return subagent_audit(
        "permission_deny",
        row,
        "denied",
        actor=actor,
        context={"request_id": request.request_id, "decision": CANCELLED, "reason": reason},
        tool_name=request.tool_name,
        tool_input=stored_input(request),
    )
