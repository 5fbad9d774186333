"""Traces of a real daemon process (real CLI, mock model) exported over OTLP to receivers the
test starts: a grpc TraceService and an HTTP handler, both built from the OTLP protobuf
definitions (opentelemetry-proto). No external collector."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
from harness.daemon import Client, DaemonProcess, Decision, daemon_process_env
from harness.environment import Workspace
from harness.otlp import Received, grpc_receiver, http_receiver

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture
async def grpc_otlp() -> AsyncIterator[tuple[str, Received]]:
    async with grpc_receiver() as receiver:
        yield receiver


@pytest.fixture
def http_otlp() -> Iterator[tuple[str, Received]]:
    with http_receiver() as receiver:
        yield receiver


def child_environments(daemon: DaemonProcess) -> list[dict[str, str]]:
    """The environments of the daemon's claude processes (its telemetry would join the turn's
    trace through TRACEPARENT)."""
    assert daemon.process is not None
    found = []
    for child in psutil.Process(daemon.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found.append(child.environ())
    return found


async def traced_daemon(
    root: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace, **otel: str
) -> DaemonProcess:
    env = daemon_process_env(root, claude_bin, workspace.env(mock_api.base_url))
    env.update(otel, OTEL_BSP_SCHEDULE_DELAY="100")
    daemon = DaemonProcess(root, env)
    await asyncio.to_thread(daemon.start)
    return daemon


async def test_a_turn_with_a_tool_call_and_a_permission_wait_is_one_trace_continuing_the_clients(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    grpc_otlp: tuple[str, Received],
) -> None:
    endpoint, received = grpc_otlp
    daemon = await traced_daemon(
        tmp_path, claude_bin, mock_api, workspace,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
    )  # fmt: skip
    client = Client(daemon.socket, "traced")
    try:
        traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        client.extra_metadata = (("traceparent", traceparent),)
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        await client.wait_for("session_info")
        client.say(TOOL_PROMPT)
        request = (await client.wait_for("permission_request")).permission_request
        assert any(CLIENT_TRACE in env.get("TRACEPARENT", "") for env in child_environments(daemon))
        client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
        await client.wait_for("turn_complete")
        await received.until(
            {
                "turn",
                "claude.spawn",
                "permission.wait",
                "tool.call",
                "sqlite.persist",
                "grpc.deliver",
            }
        )
    finally:
        await client.close()
        await asyncio.to_thread(daemon.stop)

    (turn,) = received.named("turn")
    assert turn.trace_id.hex() == CLIENT_TRACE  # the client's trace, continued
    assert turn.parent_span_id.hex() == CLIENT_SPAN
    children = [span for span in received.spans if span.parent_span_id == turn.span_id]
    assert {"claude.spawn", "permission.wait", "tool.call", "sqlite.persist", "grpc.deliver"} <= {
        span.name for span in children
    }
    assert all(span.trace_id == turn.trace_id for span in received.spans)
    attributes = {a.key: a.value for a in turn.attributes}
    assert attributes["betcode.tokens.output"].int_value > 0
    (wait,) = received.named("permission.wait")
    wait_attributes = {a.key: a.value.string_value for a in wait.attributes}
    assert wait_attributes == {"betcode.decision": "user_allow", "betcode.tool_name": "Bash"}
    (tool,) = received.named("tool.call")
    assert tool.start_time_unix_nano < tool.end_time_unix_nano
    log = (tmp_path / "daemon.log").read_text()
    assert CLIENT_TRACE in log  # the daemon's own log lines carry the trace id


async def test_http_protobuf_export(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    http_otlp: tuple[str, Received],
) -> None:
    endpoint, received = http_otlp
    daemon = await traced_daemon(
        tmp_path, claude_bin, mock_api, workspace,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )  # fmt: skip
    client = Client(daemon.socket, "plain")
    try:
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        await client.wait_for("session_info")
        client.say("SCN:plain hello")
        await client.wait_for("turn_complete")
        await received.until({"turn", "claude.spawn"})
    finally:
        await client.close()
        await asyncio.to_thread(daemon.stop)
    (turn,) = received.named("turn")
    assert not turn.parent_span_id  # no traceparent from this client: a root span
