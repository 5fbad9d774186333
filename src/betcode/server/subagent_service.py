"""SubagentService (subagent.proto): request checks and conversions around `betcode.subagents`.

Thin: every decision is the domain's (manager, control, orchestrator, delegation); a domain refusal
becomes its wire error here (`subagent_error`, then `validation.domain_error`).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from betcode.core.convert import timestamp
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import check_id, domain_error, invalid
from betcode.server.agent_service import client_id_of
from betcode.server.errors import translates_errors
from betcode.storage import subagents as rows
from betcode.storage.reader import StoreReader
from betcode.subagents.admission import SpawnRequest, SubagentRefused
from betcode.subagents.control import SubagentControl
from betcode.subagents.limits import AutoApproveLimits, DelegationError, limits_from
from betcode.subagents.locks import LockMode
from betcode.subagents.manager import SubagentManager, SubagentNotFound
from betcode.subagents.orchestrations import OrchestrationNotFound, Orchestrations
from betcode.subagents.plan import PlanError, StepSpec, Strategy
from betcode.subagents.pool import PoolExhausted
from betcode.subagents.watch import subagent_events, watch_frames
from betcode.v1 import subagent_pb2 as pb

STATUS = {
    "pending": pb.SUBAGENT_STATUS_PENDING,
    "running": pb.SUBAGENT_STATUS_RUNNING,
    "completed": pb.SUBAGENT_STATUS_COMPLETED,
    "failed": pb.SUBAGENT_STATUS_FAILED,
    "cancelled": pb.SUBAGENT_STATUS_CANCELLED,
}
STRATEGY = {
    pb.ORCHESTRATION_STRATEGY_UNSPECIFIED: Strategy.DAG,
    pb.ORCHESTRATION_STRATEGY_PARALLEL: Strategy.PARALLEL,
    pb.ORCHESTRATION_STRATEGY_SEQUENTIAL: Strategy.SEQUENTIAL,
    pb.ORCHESTRATION_STRATEGY_DAG: Strategy.DAG,
}
_CODES = {code.value: code for code in ErrorCode}
LOCK_MODES = {
    pb.WORKTREE_LOCK_NONE: LockMode.NONE,
    pb.WORKTREE_LOCK_SHARED: LockMode.SHARED,
    pb.WORKTREE_LOCK_EXCLUSIVE: LockMode.EXCLUSIVE,
}


def subagent_error(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, SubagentNotFound):
        return BetCodeError(ErrorCode.SUBAGENT_NOT_FOUND, str(exc))
    if isinstance(exc, OrchestrationNotFound):
        return BetCodeError(ErrorCode.ORCHESTRATION_NOT_FOUND, str(exc))
    if isinstance(exc, PlanError | DelegationError):
        return BetCodeError(_CODES.get(exc.code, ErrorCode.INVALID_REQUEST), str(exc))
    if isinstance(exc, PoolExhausted):
        return BetCodeError(ErrorCode.POOL_EXHAUSTED, str(exc))
    if isinstance(exc, SubagentRefused):
        if exc.code == "FAILED_PRECONDITION":
            return BetCodeError(ErrorCode.WORKTREE_UNAVAILABLE, str(exc))
        details = {}
        if exc.retry_after_seconds:
            details["retry_after_ms"] = str(int(exc.retry_after_seconds * 1000))
        return BetCodeError(_CODES.get(exc.code, ErrorCode.INTERNAL), str(exc), details)
    return domain_error(exc)


serves = translates_errors(subagent_error)


class SubagentService:
    def __init__(
        self,
        manager: SubagentManager,
        control: SubagentControl,
        orchestrations: Orchestrations,
        reader: StoreReader,
    ) -> None:
        self._manager = manager
        self._control = control
        self._orchestrations = orchestrations
        self._reader = reader  # WatchSubagent reads the session's log

    @serves
    async def SpawnSubagent(
        self, request: pb.SpawnSubagentRequest, context: grpc.aio.ServicerContext
    ) -> pb.SpawnSubagentResponse:
        run = await self._manager.spawn(
            SpawnRequest(
                parent_session_id=check_id(request.parent_session_id, "parent_session_id"),
                prompt=request.prompt,
                model=request.model,
                working_directory=request.working_directory,
                allowed_tools=tuple(request.allowed_tools),
                max_turns=request.max_turns,
                env=dict(request.env),
                name=request.name,
                auto_approve=request.auto_approve,
                limits=_limits(request.auto_approve_config)
                if request.HasField("auto_approve_config")
                else AutoApproveLimits(),
                inherit_grants=request.inherit_grants,
                client_id=client_id_of(context),
                lock=LOCK_MODES.get(request.worktree_lock, LockMode.NONE),
                wait_for_lock=request.wait_for_lock,
            )
        )
        return pb.SpawnSubagentResponse(subagent_id=run.id, session_id=run.session.id)

    @serves
    async def WatchSubagent(
        self, request: pb.WatchSubagentRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SubagentEvent]:
        subagent_id = check_id(request.subagent_id, "subagent_id")
        frames = watch_frames(
            self._manager,
            self._reader,
            subagent_id,
            request.from_sequence,
            f"watch-{uuid.uuid4().hex[:12]}",
        )
        async for event in subagent_events(frames):
            yield event

    @serves
    async def SendToSubagent(
        self, request: pb.SendToSubagentRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendToSubagentResponse:
        if not request.content.strip():
            raise invalid("content is required")
        delivered = await self._manager.send(
            check_id(request.subagent_id, "subagent_id"), request.content
        )
        return pb.SendToSubagentResponse(delivered=delivered)

    @serves
    async def CancelSubagent(
        self, request: pb.CancelSubagentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelSubagentResponse:
        subagent_id = check_id(request.subagent_id, "subagent_id")
        cancelled = await self._control.cancel(
            subagent_id,
            request.reason,
            client_id_of(context),
            force=request.force,
            cleanup_worktree=request.cleanup_worktree,
        )
        row = await self._manager.get(subagent_id)
        response = pb.CancelSubagentResponse(final_status=row.status)
        if cancelled is not None:
            response.cancelled = True
            response.tool_calls_executed = cancelled.tool_calls
            response.tool_calls_auto_approved = cancelled.auto_approved
            if cancelled.worktree is not None:
                response.worktree_removed = cancelled.worktree.removed
                response.worktree_kept_reason = cancelled.worktree.kept_reason
        return response

    @serves
    async def ListSubagents(
        self, request: pb.ListSubagentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSubagentsResponse:
        if request.status_filter and request.status_filter not in STATUS:
            raise invalid(f"status_filter must be one of {', '.join(STATUS)}")
        found = await self._manager.list_rows(request.parent_session_id, request.status_filter)
        return pb.ListSubagentsResponse(subagents=[subagent_info(row) for row in found])

    @serves
    async def RevokeAutoApprove(
        self, request: pb.RevokeAutoApproveRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeAutoApproveResponse:
        if len(request.reason.strip()) < 10:
            raise invalid("reason must be at least 10 characters (it is audited)")
        revoked = await self._control.revoke(
            check_id(request.subagent_id, "subagent_id"),
            request.reason,
            request.terminate_if_pending,
            client_id_of(context),
        )
        return pb.RevokeAutoApproveResponse(
            revoked=revoked.revoked,
            pending_tool_calls=revoked.pending_tool_calls,
            subagent_status=revoked.status,
        )

    @serves
    async def CreateOrchestration(
        self, request: pb.CreateOrchestrationRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateOrchestrationResponse:
        strategy = STRATEGY.get(request.strategy)
        if strategy is None:
            raise invalid(f"unknown strategy {request.strategy}")
        orchestration = await self._orchestrations.create(
            check_id(request.parent_session_id, "parent_session_id"),
            [step_spec(step) for step in request.steps],
            strategy,
        )
        return pb.CreateOrchestrationResponse(
            orchestration_id=orchestration.id, total_steps=len(orchestration.steps)
        )

    @serves
    async def ListOrchestrations(
        self, request: pb.ListOrchestrationsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOrchestrationsResponse:
        parent = check_id(request.parent_session_id, "parent_session_id", required=False)

        def read(conn: sqlite3.Connection) -> list[pb.OrchestrationInfo]:
            return [
                orchestration_info(row, rows.step_places(conn, row.id))
                for row in rows.list_orchestrations(conn, parent)
            ]

        return pb.ListOrchestrationsResponse(orchestrations=await self._reader.read(read))

    @serves
    async def CancelOrchestration(
        self, request: pb.CancelOrchestrationRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelOrchestrationResponse:
        client_id = client_id_of(context)
        reason = request.reason or "the plan was cancelled"

        async def stop(subagent_id: str) -> None:
            await self._control.cancel(subagent_id, reason, client_id)

        cancelled = await self._orchestrations.cancel(
            check_id(request.orchestration_id, "orchestration_id"), reason, stop
        )
        return pb.CancelOrchestrationResponse(cancelled=cancelled)

    @serves
    async def RetryOrchestration(
        self, request: pb.RetryOrchestrationRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryOrchestrationResponse:
        again = await self._orchestrations.retry(
            check_id(request.orchestration_id, "orchestration_id"),
            [check_id(step, "step_ids") for step in request.step_ids],
        )
        return pb.RetryOrchestrationResponse(step_ids=again)

    @serves
    async def WatchOrchestration(
        self, request: pb.WatchOrchestrationRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.OrchestrationEvent]:
        async for event in self._orchestrations.watch(
            check_id(request.orchestration_id, "orchestration_id")
        ):
            yield event


def _limits(config: pb.AutoApproveConfig) -> AutoApproveLimits:
    return limits_from(
        {
            "max_duration_seconds": config.max_duration_seconds,
            "tool_calls_per_minute": config.tool_calls_per_minute,
            "tool_calls_per_session": config.tool_calls_per_session,
            "bash_commands_per_minute": config.bash_commands_per_minute,
            "write_operations_per_minute": config.write_operations_per_minute,
        },
        config.queue_on_rate_limit,
    )


def step_spec(step: pb.OrchestrationStep) -> StepSpec:
    return StepSpec(
        id=step.id,
        prompt=step.prompt,
        name=step.name,
        model=step.model,
        working_directory=step.working_directory,
        allowed_tools=tuple(step.allowed_tools),
        depends_on=tuple(step.depends_on),
        max_turns=step.max_turns,
        auto_approve=step.auto_approve,
        worktree=step.worktree,
        limits=_limits(step.auto_approve_config) if step.HasField("auto_approve_config") else None,
    )


def _timestamp(seconds: float | None) -> Timestamp | None:
    if seconds is None:
        return None
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def orchestration_info(
    row: rows.OrchestrationRow, places: dict[str, rows.StepPlace]
) -> pb.OrchestrationInfo:
    info = pb.OrchestrationInfo(
        id=row.id,
        parent_session_id=row.parent_session_id,
        strategy=row.strategy,
        status=row.status,
        total_steps=row.total_steps,
        completed_steps=row.completed_steps,
        failed_steps=row.failed_steps,
        created_at=timestamp(row.created_at),
        error_message=row.error_message or "",
    )
    if row.completed_at is not None:
        info.completed_at.CopyFrom(timestamp(row.completed_at))
    for step in row.steps:
        place = places.get(step.step_key)
        info.steps.append(
            pb.OrchestrationStepInfo(
                id=step.step_key,
                name=step.name,
                status=step.status,
                depends_on=step.depends_on,
                subagent_id=step.subagent_id or "",
                session_id=place.session_id if place else "",
                working_directory=place.working_directory if place else "",
                worktree_id=place.worktree_id if place else "",
                worktree_name=place.worktree_name if place else "",
                branch=place.branch if place else "",
                result_summary=step.result_summary or "",
                error_message=step.error_message or "",
            )
        )
    return info


def subagent_info(row: rows.SubagentRow) -> pb.SubagentInfo:
    return pb.SubagentInfo(
        id=row.id,
        parent_session_id=row.parent_session_id,
        session_id=row.session_id,
        name=row.name,
        prompt=row.prompt,
        model=row.model,
        working_directory=row.working_directory,
        status=STATUS[row.status],
        auto_approve=row.auto_approve,
        max_turns=row.max_turns,
        allowed_tools=row.allowed_tools,
        result_summary=row.result_summary or row.error_message or "",
        created_at=_timestamp(row.created_at),
        completed_at=_timestamp(row.completed_at),
        orchestration_id=row.orchestration_id or "",
        step_id=row.step_id or "",
    )
