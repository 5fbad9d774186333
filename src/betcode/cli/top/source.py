"""What the board reads from the daemon and asks it to do, on one connection made on the app's
own event loop (and made again after a failure)."""

from __future__ import annotations

from betcode.cli.connection import DaemonAddress, DaemonClient, DaemonError
from betcode.cli.ids import SUBAGENTS, WORKTREES
from betcode.cli.top.rows import SessionRow, session_rows
from betcode.v1 import agent_pb2, common_pb2, monitor_pb2, monitor_pb2_grpc

Decision = common_pb2.PermissionDecision


async def sessions_overview(client: DaemonClient) -> monitor_pb2.SessionsOverview:
    """Every session with its live state, clients, approvals waiting and recent spend."""
    stub = client.service_stub(monitor_pb2_grpc.MonitorServiceStub)
    return await client.call(stub.GetSessionsOverview, monitor_pb2.SessionsOverviewRequest())


async def board_rows(client: DaemonClient) -> list[SessionRow]:
    """Every session's row, with its worktree's name and branch and its subagents nested."""
    overview = await sessions_overview(client)
    worktrees = {w.id: w for w in await WORKTREES.fetch(client)}
    parents = {s.session_id: s.parent_session_id for s in await SUBAGENTS.fetch(client)}
    return session_rows(overview, worktrees, parents)


class DaemonBoard:
    def __init__(self, address: DaemonAddress) -> None:
        self._address = address
        self._client: DaemonClient | None = None

    async def _connected(self) -> DaemonClient:
        if self._client is None:
            self._client = await DaemonClient.connect(self._address)
        return self._client

    async def _drop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def rows(self) -> list[SessionRow]:
        try:
            return await board_rows(await self._connected())
        except DaemonError:
            await self._drop()
            raise

    async def answer_oldest(self, session_id: str, *, allow: bool) -> str:
        """Allows or denies the session's oldest waiting request; says what became of it."""
        client = await self._connected()
        waiting = await client.list_pending_permissions(session_id)
        if not waiting:
            return "nothing is waiting in this session"
        oldest = min(waiting, key=lambda row: row.received_at.ToNanoseconds())
        if allow and oldest.is_question:
            return (
                f"{oldest.request_id} is a question: answer it in the chat (enter) or with "
                f"`betcode permissions answer {oldest.request_id}`"
            )
        decision = (
            Decision.PERMISSION_DECISION_ALLOW_ONCE if allow else Decision.PERMISSION_DECISION_DENY
        )
        request = agent_pb2.AnswerPermissionRequest(
            session_id=session_id, request_id=oldest.request_id, decision=decision
        )
        answered = await client.answer_permission(request)
        return f"{oldest.request_id} ({oldest.tool_name}): {answered.outcome}"

    async def cancel_turn(self, session_id: str) -> str:
        active = await (await self._connected()).cancel_turn(session_id)
        return "turn cancelled" if active else "no turn was running"

    async def delete(self, session_id: str) -> str:
        await (await self._connected()).delete_session(session_id)
        return f"deleted {session_id}"

    async def close(self) -> None:
        await self._drop()
