"""The daemon tells its relay what needs a human (TOP-06), over the open tunnel: each waiting
permission request or question once (read on the daemon's own socket like any client), and
each finished or failed turn (sessions.attention). Nothing is announced for a session whose
input lock a client holds; a request skipped so is announced once the lock is free, if it
still waits. The relay decides whether to notify (webhook, dedup, rate limits)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc.aio

from betcode.remote.notify_params import ID_PARAM, NOTIFY_PARAM, SESSION_PARAM, TITLE_PARAM
from betcode.sessions.attention import AttentionLog, WaitingNotices
from betcode.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger(__name__)

Announce = Callable[[dict[str, str]], Awaitable[None]]


class Announcer:
    def __init__(self, attention: AttentionLog | None) -> None:
        self._attention = attention
        self._waiting = WaitingNotices(attention)

    async def round(self, stub: agent_pb2_grpc.AgentServiceStub, announce: Announce) -> None:
        """One look: announces what is new since the last one."""
        attention = self._attention
        if attention is not None:
            for noted in attention.take():
                await announce(
                    {
                        NOTIFY_PARAM: noted.kind,
                        SESSION_PARAM: noted.session_id,
                        ID_PARAM: noted.notification_id,
                        TITLE_PARAM: noted.title,
                    }
                )
        try:
            pending = await stub.ListPendingPermissions(
                agent_pb2.ListPendingPermissionsRequest(), timeout=10
            )
        except grpc.aio.AioRpcError as error:
            log.debug("attention check failed: %s", error.code())
            return
        for row in self._waiting.new(pending.pending):
            await announce(
                {
                    NOTIFY_PARAM: "question" if row.is_question else "permission",
                    SESSION_PARAM: row.session_id,
                    ID_PARAM: row.request_id,
                    TITLE_PARAM: "" if attention is None else attention.title(row.session_id),
                }
            )
