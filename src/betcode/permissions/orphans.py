"""Answers that arrive after the claude process that asked is gone (daemon restart, crash,
idle reaping). The answer is never lost, and an approved operation runs at most once.

claude does not ask again by itself: a process that resumes the conversation finds the call
interrupted. So the bridge tells the new process (with `--resume`, through a user message)
what the user decided:

* allow: the stored answer becomes a *one-shot grant*. The note says the user approved
  `<tool>` with `<input>` and that it may run it now; the first `can_use_tool` of that session
  with the same tool and input is allowed (with the approved input) and consumes the grant.
  The grant is the pending row itself (`response_received` = 1, `delivered` = 0): consuming it
  sets `delivered` in the same writer transaction that checks it, so even across further
  daemon restarts a second identical call is asked again, never run again. A one-shot grant
  lasts one TTL after the answer.
* deny, or answers to AskUserQuestion: the note carries them; the row is marked delivered.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from betcode.permissions.decisions import ALLOWING_DECISIONS, Reply
from betcode.protocol.messages import Dialect
from betcode.sessions.session import Session
from betcode.storage import pending as pending_rows
from betcode.storage.pending import PendingPermission
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)

NOTE_PREFIX = "[BetCode] While you were restarting, "
MAX_SHOWN_INPUT_CHARS = 2000
# Labels that do not change what a call does; the model may word them differently on retry.
COSMETIC_INPUT_KEYS = frozenset({"description"})


def approved_input(row: PendingPermission) -> dict[str, Any]:
    """The input the user approved: the edited input of ALLOW_WITH_EDIT, else claude's own."""
    original: dict[str, Any] = json.loads(row.input)
    if row.response_payload is None:
        return original
    key = "updated_input" if row.dialect == Dialect.DART_SDK else "updatedInput"
    try:
        edited = json.loads(row.response_payload)["response"]["response"].get(key)
    except (ValueError, KeyError, TypeError, AttributeError):
        return original
    return edited if isinstance(edited, dict) else original


def resume_note(row: PendingPermission, reply: Reply, answers: Mapping[str, str]) -> str:
    """The user message that tells a resumed claude what the user decided."""
    if reply.decision == "answered":
        shown = ", ".join(f'"{question}"="{answer}"' for question, answer in answers.items())
        return (
            f"{NOTE_PREFIX}the user answered your questions ({row.tool_name}): {shown}. "
            "Continue with these answers in mind."
        )
    tool_input = approved_input(row) if reply.allows else json.loads(row.input)
    call = f"{row.tool_name} with input {_shown(tool_input)}"
    if reply.allows:
        edited = (
            " (with the input as the user edited it)" if reply.decision == "allow_with_edit" else ""
        )
        return (
            f"{NOTE_PREFIX}the user approved the tool call that was waiting for permission"
            f"{edited}: {call}. It has not run. If it is still needed, make exactly this call "
            "again now; it will be allowed once."
        )
    return (
        f"{NOTE_PREFIX}the user denied the tool call that was waiting for permission: {call}. "
        f"Do not run it. The user's message: {reply.message}"
    )


def one_shot_for(
    rows: Iterable[PendingPermission],
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    now: float,
    lifetime: float,
) -> PendingPermission | None:
    """The oldest unconsumed one-shot grant (undelivered approved answer) covering this call."""
    for row in rows:
        if (
            row.response_decision in ALLOWING_DECISIONS
            and not row.delivered
            and row.tool_name == tool_name
            and (row.response_at or 0) + lifetime > now
            and same_call(approved_input(row), tool_input)
        ):
            return row
    return None


def same_call(approved: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """Equal inputs, ignoring cosmetic labels such as a Bash call's `description`."""
    return _essential(approved) == _essential(requested)


def claim_delivery(conn: sqlite3.Connection, request_id: str) -> bool:
    """Mark an answered request delivered, exactly once: True only for the call that did it.
    Atomic because the single writer runs each call alone in its own transaction."""
    row = pending_rows.get_pending(conn, request_id)
    if row is None or not row.response_received or row.delivered:
        return False
    return pending_rows.mark_delivered(conn, request_id)


async def tell_resumed_claude(
    session: Session,
    row: PendingPermission,
    reply: Reply,
    answers: Mapping[str, str],
    writer: StoreWriter,
) -> None:
    """Send the note (starting claude with --resume if it is not running). A deny or answers
    are then delivered; an approval waits as a one-shot grant for claude's next call."""
    log.info(
        "session %s: the process that asked %s is gone; telling a resumed claude (%s)",
        session.id,
        row.request_id,
        reply.decision,
    )
    try:
        await session.send_user_message(None, resume_note(row, reply, answers))
    except Exception:
        # The answer is stored; a one-shot approval still applies to claude's next such call.
        log.exception("session %s: could not tell claude about %s", session.id, row.request_id)
        return
    if reply.decision not in ALLOWING_DECISIONS:
        await writer.call(lambda c: pending_rows.mark_delivered(c, row.request_id))


def _essential(tool_input: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tool_input.items() if k not in COSMETIC_INPUT_KEYS}


def _shown(tool_input: Mapping[str, Any]) -> str:
    text = json.dumps(tool_input, ensure_ascii=False)
    if len(text) <= MAX_SHOWN_INPUT_CHARS:
        return text
    return text[:MAX_SHOWN_INPUT_CHARS] + " …(cut; the call is the one you made before)"
