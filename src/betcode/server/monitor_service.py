"""betcode.v1.MonitorService: every session with its live state (`betcode top`).

One answer gathers the stored summaries (most recently updated first), the live sessions'
state and attached clients, the pending permissions by session, and each session's spend in
the last 10 minutes (observability/recent.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import grpc

from betcode.core import convert
from betcode.limits.admission import TurnAdmission
from betcode.observability.recent import RecentSpend
from betcode.permissions.bridge import PermissionBridge
from betcode.sessions.manager import SessionManager
from betcode.v1 import common_pb2, monitor_pb2

DEFAULT_LIMIT = 200


class MonitorService:
    def __init__(
        self,
        sessions: SessionManager,
        bridge: PermissionBridge,
        spend: Callable[[str], RecentSpend],
        admission: TurnAdmission,
    ) -> None:
        self._sessions = sessions
        self._bridge = bridge
        self._spend = spend
        self._admission = admission

    async def GetSessionsOverview(
        self, request: monitor_pb2.SessionsOverviewRequest, context: grpc.aio.ServicerContext
    ) -> monitor_pb2.SessionsOverview:
        page = await self._sessions.list(limit=request.limit or DEFAULT_LIMIT)
        pending = Counter(row.session_id for row in await self._bridge.list_pending(None))
        live = {session.id: session for session in self._sessions.live}
        overview = monitor_pb2.SessionsOverview(
            total=page.total, taken_at=convert.timestamp(time.time())
        )
        for record in page.sessions:
            session = live.get(record.id)
            spend = self._spend(record.id)
            overview.sessions.append(
                monitor_pb2.SessionOverview(
                    summary=convert.session_summary(record),
                    agent_status=(
                        session.translator.status
                        if session is not None
                        else common_pb2.AGENT_STATUS_UNSPECIFIED
                    ),
                    loaded=session is not None,
                    clients_attached=len(session.hub) if session is not None else 0,
                    pending_permissions=pending[record.id],
                    cost_last_10m_usd=spend.cost_usd,
                    cost_per_hour_usd=spend.cost_per_hour_usd,
                    cache_read_tokens_last_10m=spend.cache_read_tokens,
                )
            )
        await self._admission.describe(item.summary for item in overview.sessions)
        return overview
