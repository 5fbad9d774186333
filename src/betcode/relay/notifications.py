"""Attention notifications (TOP-06): a daemon tells its relay that a session needs a human (a
permission request or a question waits, a turn finished or failed) while no client holds the
session's input lock (tunnel/attention.py); the relay holding its tunnel POSTs an ntfy-style
message to the configured webhook. Deduplicated by notification id; at most 5 per hour per
session and 20 per day per user, counted by every relay instance on the NATS cluster together
(remote/attention_limits.py, relay/notify_limits.py). The message names the machine, the
session (its title: name or directory) and the kind only: no conversation content reaches the
webhook (the relay has none to give)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from betcode.remote.attention_limits import (
    PER_SESSION_PER_HOUR,
    PER_USER_PER_DAY,
    MemoryLimits,
    NotifyLimits,
    admit_notification,
)
from betcode.remote.notify_params import ID_PARAM, NOTIFY_PARAM, SESSION_PARAM, TITLE_PARAM

log = logging.getLogger(__name__)

MAX_TITLE_CHARS = 80
KINDS = frozenset({"permission", "question", "error", "turn_finished"})
POST_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class NotifySettings:
    webhook: str = ""
    per_session_per_hour: int = PER_SESSION_PER_HOUR
    per_user_per_day: int = PER_USER_PER_DAY


class Notifications:
    def __init__(
        self,
        settings: NotifySettings,
        clock: Callable[[], float] = time.time,
        limits: NotifyLimits | None = None,
    ) -> None:
        self.settings = settings
        self.limits: NotifyLimits = limits or MemoryLimits(clock)
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
        if not await admit_notification(
            self.limits,
            f"{machine_id}/{notification_id}",
            f"{machine_id}/{session_id}",
            owner_id,
            per_session_per_hour=self.settings.per_session_per_hour,
            per_user_per_day=self.settings.per_user_per_day,
        ):
            return False
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
