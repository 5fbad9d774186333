"""What is pushed, and when: the relay's attention notifications (sessions.attention), as Web
Push to every subscribed browser. A push goes out when a permission request or a question
waits (each once while it waits), a turn finishes or a session fails; none for a session whose
input lock a client holds (someone is at it: a request skipped so is pushed once the lock is
free, if it still waits); deduplicated and rate-limited (remote/attention_limits.py) in two
budgets, so that turn ends never starve what waits for an answer: requests and questions at
most 20 an hour per session and 100 a day for this daemon; turn ends and failures, as the
relay's webhook, 5 an hour per session and 20 a day.

The payload names the session, the tool and what it wants to do (the audit log's redacted
preview of its input), and carries the request id, so the notification can answer it. A pushed
request that no longer waits (answered anywhere, expired, withdrawn) is pushed once more as
`resolved`, with its outcome, under the same notification id: the browser replaces the
notification, so no device offers to answer what is already answered. Those are not counted
against the limits (there is one per request pushed). A pushed request is marked so in SQLite
(`pending_permissions.push_notification_id`): a restarted daemon does not push it again.

A waiting request's push for a device reached through the relay that could not be handed to
the relay (the tunnel down) is sent again at each look while the request waits: the phone hears
of it once the relay is back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from betcode.observability.redaction import cap_utf8, preview_of, redact
from betcode.permissions.decisions import outcome_of
from betcode.push.sender import PushSender
from betcode.push.subscriptions import Subscriptions
from betcode.remote.attention_limits import (
    PER_SESSION_PER_HOUR,
    PER_USER_PER_DAY,
    MemoryLimits,
    admit_notification,
)
from betcode.remote.web_push import RelayUnreachable
from betcode.sessions.attention import AttentionLog, AttentionSession, WaitingNotices
from betcode.storage.pending import PendingPermission

log = logging.getLogger(__name__)

# The tunnel's look for what needs a human is as often: a request skipped while the lock was
# held is pushed at most this long after the lock is free.
POLL_SECONDS = 5.0
USER_KEY = "daemon"  # the daemon's one user: the per-user limit is this daemon's


@dataclass(frozen=True)
class Budget:
    """One rate limit: its own windows, counted apart from the other budget's."""

    name: str
    per_session_per_hour: int
    per_day: int


# A request waits for a human: an active user's turn ends must not use up its pushes.
REQUESTS = Budget("requests", 20, 100)
STATUS = Budget("status", PER_SESSION_PER_HOUR, PER_USER_PER_DAY)
REQUEST_KINDS = ("permission", "question")
BUDGET_OF_KIND = {
    "permission": REQUESTS,
    "question": REQUESTS,
    "turn_finished": STATUS,
    "error": STATUS,
}
TITLE_BYTES = 120
DESCRIPTION_BYTES = 500  # a push message holds about 4 KB
HEADLINES = {
    "permission": "{tool} waits for your approval",
    "question": "Claude asks you a question",
    "turn_finished": "The turn is finished",
    "error": "The session stopped with an error",
    "resolved": "{tool}: {outcome}",
}


class Requests(Protocol):
    """Where requests wait (permissions.bridge.PermissionBridge is it)."""

    forwarded_listeners: list[Callable[[str], None]]

    async def list_pending(self, session_id: str | None) -> list[PendingPermission]: ...

    async def find_request(self, request_id: str) -> PendingPermission | None: ...


class PushNotifications:
    def __init__(
        self,
        bridge: Requests,
        subscriptions: Subscriptions,
        sender: PushSender,
        *,
        signed_in: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        """`signed_in(device_id)`: whether the device that registered a subscription may still
        be told anything (not revoked, made under the current access token)."""
        self._bridge = bridge
        self._subscriptions = subscriptions
        self._sender = sender
        self._signed_in = signed_in
        self._poll_seconds = poll_seconds
        self._wake = asyncio.Event()
        self.attention = AttentionLog(on_noted=self._wake.set)
        self._waiting = WaitingNotices(self.attention)
        self._limits = MemoryLimits(clock)
        self._pushed: dict[str, dict[str, Any]] = {}  # request id → its notice, while it waits
        # request id → the relayed subscriptions its push did not reach the relay for
        self._relay_later: dict[str, set[str]] = {}
        bridge.forwarded_listeners.append(lambda _session_id: self._wake.set())

    def watch(self, session: AttentionSession) -> None:
        """Called for every session that comes alive (its turn ends and input lock)."""
        self.attention.watch(session)

    async def run(self) -> None:
        """Looks at once when woken (a request forwarded, a turn ended), else every poll."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_seconds)
            self._wake.clear()
            try:
                await self.round()
            except Exception:
                log.exception("push notifications: a look failed; trying again")

    async def round(self) -> None:
        """One look: pushes what is new since the last one."""
        notices = [
            self._notice(noted.kind, noted.session_id, noted.notification_id)
            for noted in self.attention.take()
        ]
        waiting = await self._bridge.list_pending(None)
        for row in waiting:
            if row.push_notification_id is not None and row.request_id not in self._pushed:
                # Pushed by an earlier daemon: not again, but its resolution is pushed.
                self._pushed[row.request_id] = self._request_notice(row)
        for row in self._waiting.new(waiting):
            if row.push_notification_id is None:
                notices.append(self._request_notice(row))
        for notice in notices:
            budget = BUDGET_OF_KIND[notice["kind"]]
            if not await admit_notification(
                self._limits,
                notice["notification_id"],
                f"{budget.name}:{notice['session_id']}",
                f"{budget.name}:{USER_KEY}",
                per_session_per_hour=budget.per_session_per_hour,
                per_user_per_day=budget.per_day,
            ):
                continue
            if await self._push(notice) and "request_id" in notice:
                self._pushed[notice["request_id"]] = notice
                await self._subscriptions.mark_pushed(notice["request_id"])
        still = {row.request_id for row in waiting}
        for request_id, endpoints in list(self._relay_later.items()):
            del self._relay_later[request_id]
            if request_id in still and request_id in self._pushed:
                await self._push(self._pushed[request_id], endpoints)
        for request_id in [known for known in self._pushed if known not in still]:
            await self._push(await self._resolved(self._pushed.pop(request_id)))

    async def _resolved(self, pushed: dict[str, Any]) -> dict[str, Any]:
        row = await self._bridge.find_request(pushed["request_id"])
        outcome = outcome_of(row.response_decision if row is not None else None)
        outcome = outcome or "no longer waiting"
        return {
            **pushed,
            "kind": "resolved",
            "outcome": outcome,
            "title": HEADLINES["resolved"].format(
                tool=pushed.get("tool", "Request"), outcome=outcome
            ),
        }

    async def _push(self, notice: dict[str, Any], only: set[str] | None = None) -> bool:
        """Sends to every subscription of a signed-in device (or those of `only`); True if
        there was any. A waiting request's relayed subscriptions the relay was out of reach
        for are tried again at each look while it waits."""
        subscriptions = [
            each
            for each in await self._subscriptions.all()
            if self._signed_in(each.device_id) and (only is None or each.endpoint in only)
        ]
        sent = await asyncio.gather(
            *(self._sender.send(each, notice) for each in subscriptions), return_exceptions=True
        )
        away: set[str] = set()
        for subscription, outcome in zip(subscriptions, sent, strict=True):
            if isinstance(outcome, RelayUnreachable):
                away.add(subscription.endpoint)
                why = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        if away and notice["kind"] in REQUEST_KINDS:
            if only is None:
                log.info("push of %s waits for the relay (%s)", notice["request_id"], why)
            self._relay_later[notice["request_id"]] = away
        return bool(subscriptions)

    def _notice(self, kind: str, session_id: str, notification_id: str) -> dict[str, Any]:
        session = cap_utf8(self.attention.title(session_id), TITLE_BYTES) or session_id[:8]
        return {
            "kind": kind,
            "notification_id": notification_id,
            "session_id": session_id,
            "session": session,
            "title": HEADLINES[kind].format(tool="A tool"),
            "body": session,
        }

    def _request_notice(self, row: PendingPermission) -> dict[str, Any]:
        kind = "question" if row.is_question else "permission"
        notice = self._notice(kind, row.session_id, row.request_id)
        try:
            tool_input = json.loads(row.input)
        except ValueError:
            tool_input = {}
        action = preview_of(tool_input if isinstance(tool_input, dict) else {})
        notice.update(
            request_id=row.request_id,
            tool=row.tool_name,
            action=action,
            description=cap_utf8(redact(row.tool_description or ""), DESCRIPTION_BYTES),
            title=HEADLINES[kind].format(tool=row.tool_name),
            body=f"{notice['session']}: {action}",
        )
        return notice
