"""A graceful stop (`daemon stop`, and `daemon restart`'s) ends every client's stream of a
session, and the watch of a subagent or a plan, at once, UNAVAILABLE with DAEMON_STOPPED, so
the client reconnects to the next daemon: the stop's grace waits only for requests in flight.
Before, a stream lasted as long as its client kept it, and every stop with a client attached
took the whole grace (5 s; benchmarks/bench_graceful_stop.py). A real daemon in this event loop
with the pinned real CLI against the mock model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from harness.conditions import until
from harness.daemon import Client, daemon_config
from harness.environment import Workspace

from betcode import daemon as daemon_module
from betcode.core.errors import ErrorCode, error_code_of
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, subagent_pb2, subagent_pb2_grpc

pytestmark = pytest.mark.real_cli

STALLED = 'SCN:stall_first_byte {"seconds": 60} the long turn'


async def read_to_the_end(call: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
    while await call.read() is not grpc.aio.EOF:
        pass


async def test_a_graceful_stop_ends_clients_streams_at_once_saying_daemon_stopped(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Were the streams still waited for, this stop would take an hour.
    monkeypatch.setattr(daemon_module, "SHUTDOWN_GRACE_SECONDS", 3600.0)
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    daemon = Daemon(config)
    await daemon.start()
    writer, observer = Client(config.socket_path, "writer"), Client(config.socket_path, "watcher")
    channel = grpc.aio.insecure_channel(f"unix:{config.socket_path}")
    stopped = False
    try:
        writer.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        writer.say("SCN:plain")
        await writer.wait_for("turn_complete")
        observer.resume(writer.session_id)
        # A subagent whose turn waits on the model, watched (as `betcode subagent watch`).
        subagents = subagent_pb2_grpc.SubagentServiceStub(channel)
        spawned = await subagents.SpawnSubagent(
            subagent_pb2.SpawnSubagentRequest(
                parent_session_id=writer.session_id, prompt=STALLED, name="slow"
            )
        )
        watch = subagents.WatchSubagent(
            subagent_pb2.WatchSubagentRequest(subagent_id=spawned.subagent_id)
        )
        assert (await watch.read()).WhichOneof("event") == "started"
        # A plan whose step waits on the model, watched (as `betcode orchestrate watch`).
        plan = await subagents.CreateOrchestration(
            subagent_pb2.CreateOrchestrationRequest(
                parent_session_id=writer.session_id,
                steps=[subagent_pb2.OrchestrationStep(id="slow", prompt=STALLED)],
            )
        )
        plan_watch = subagents.WatchOrchestration(
            subagent_pb2.WatchOrchestrationRequest(orchestration_id=plan.orchestration_id)
        )
        assert await plan_watch.read() is not grpc.aio.EOF  # attached
        assert daemon.sessions is not None
        session = await daemon.sessions.get(writer.session_id)
        await until(lambda: len(session.hub) == 2)  # both attached

        async with asyncio.timeout(60):
            await daemon.stop()
        stopped = True
        for client in (writer, observer):
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await client.ended()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, client.client_id
            assert error_code_of(ended.value) == ErrorCode.DAEMON_STOPPED, client.client_id
        for call in (watch, plan_watch):
            with pytest.raises(grpc.aio.AioRpcError) as watched:
                await read_to_the_end(call)
            assert watched.value.code() == grpc.StatusCode.UNAVAILABLE
            assert error_code_of(watched.value) == ErrorCode.DAEMON_STOPPED
    finally:
        mock_api.release_stalls()
        if not stopped:  # the stop waited for the streams: stopped again, its grace back to 5 s
            monkeypatch.undo()
            await daemon.stop()
        for client in (writer, observer):
            await client.close()
        await channel.close()
