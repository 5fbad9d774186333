"""The audit events of a subagent's life (spawn, complete, fail, cancel, revoke): pure.

Each names the subagent, its session and its parent session; the actor is the client that
asked (a user) or, for what the daemon does on its own, the subagent manager.
"""

from __future__ import annotations

from collections.abc import Mapping

from betcode.storage import subagents as rows
from betcode.storage.audit import AuditEvent, EventType
from betcode.storage.audit import Outcome as AuditOutcome

DAEMON_ACTOR = "subagent-manager"


def subagent_audit(
    event_type: EventType,
    row: rows.SubagentRow,
    outcome: AuditOutcome,
    *,
    actor: str | None = None,
    error: str = "",
    context: Mapping[str, str] | None = None,
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
    )
