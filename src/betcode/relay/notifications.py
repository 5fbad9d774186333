"""Attention notifications (TOP-06): a daemon tells its relay that a session needs a human (a
permission request or a question waits, a turn finished or failed) while no client holds the
session's input lock (tunnel/attention.py); the relay holding its tunnel POSTs an ntfy-style
message to the configured webhook. Deduplicated by notification id; at most 5 per hour per
session and 20 per day per user. Ids and counters live in this relay instance's memory: with
several relays, a daemon that moves to another one starts with fresh limits there. The message
names the machine, the session (its title: name or directory) and the kind only: no
conversation content reaches the webhook (the relay has none to give)."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

log = logging.getLogger(__name__)

NOTIFY_PARAM = "notify"
SESSION_PARAM = "session_id"
ID_PARAM = "notification_id"
TITLE_PARAM = "title"
MAX_TITLE_CHARS = 80
KINDS = frozenset({"permission", "question", "error", "turn_finished"})
POST_TIMEOUT_SECONDS = 10.0
REMEMBERED_IDS = 10_000


@dataclass(frozen=True)
class NotifySettings:
    webhook: str = ""
    per_session_per_hour: int = 5
    per_user_per_day: int = 20


class _Window:
    """How many events fell in the last ``seconds`` (a sliding log per key)."""

    def __init__(self, seconds: float, limit: int, clock: Callable[[], float]) -> None:
        self._seconds = seconds
        self._limit = limit
        self._clock = clock
        self._events: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )

    def allows(self, key: str) -> bool:
        now = self._clock()
        events = self._events[key]
        while events and events[0] <= now - self._seconds:
            events.popleft()
        return len(events) < self._limit

    def record(self, key: str) -> None:
        self._events[key].append(self._clock())


class Notifications:
    def __init__(self, settings: NotifySettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._per_session = _Window(3600, settings.per_session_per_hour, clock)
        self._per_user = _Window(86400, settings.per_user_per_day, clock)
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def notify(
        self, machine_id: str, machine_name: str, owner_id: str, params: Mapping[str, str]
    ) -> bool:
        """Sends one notification; False when it was a duplicate, rate-limited, malformed or
        no webhook is configured (each is logged)."""
        kind = params.get(NOTIFY_PARAM, "")
        session_id = params.get(SESSION_PARAM, "")
        notification_id = params.get(ID_PARAM, "")
        if not self.settings.webhook or kind not in KINDS or not notification_id:
            return False
        key = f"{machine_id}/{notification_id}"
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > REMEMBERED_IDS:
            self._seen.popitem(last=False)
        session_key = f"{machine_id}/{session_id}"
        if not (self._per_session.allows(session_key) and self._per_user.allows(owner_id)):
            log.info("notification %s for %s rate-limited", notification_id, session_key)
            return False
        self._per_session.record(session_key)
        self._per_user.record(owner_id)
        title = "".join(c for c in params.get(TITLE_PARAM, "") if c.isprintable())
        await self._post(machine_name or machine_id, session_id, kind, title[:MAX_TITLE_CHARS])
        return True

    async def _post(self, machine: str, session_id: str, kind: str, title: str) -> None:
        what = {
            "permission": "a tool call waits for your approval",
            "question": "claude asks you a question",
            "error": "the session stopped with an error",
            "turn_finished": "the turn is finished",
        }[kind]
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_SECONDS)
            )
        try:
            async with self._http.post(
                self.settings.webhook,
                data=f"{machine}: {what} ({title or 'session'} {session_id[:8]})".encode(),
                headers={"Title": "BetCode", "Tags": kind, "X-BetCode-Session": session_id},
            ) as response:
                if response.status >= 400:
                    log.warning("notification webhook answered %d", response.status)
        except (aiohttp.ClientError, TimeoutError) as error:
            log.warning("notification webhook failed: %s", error)
