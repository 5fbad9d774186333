"""The daemon driven by a second gRPC client stack: @grpc/grpc-js on Node's own HTTP/2
(tests/conformance/grpc_js_client, pinned by its lock file), against both of the daemon's
servers and both sockets: a unary call, a conversation streamed live and replayed, and an error
status with its details, each as grpcio's client sees it too."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from stub_calls import PLAIN_PROMPT, Served, collect, kind

from betcode import __version__
from betcode.v1 import agent_pb2, agent_pb2_grpc

pytestmark = pytest.mark.real_cli

CLIENT = Path(__file__).resolve().parent / "grpc_js_client"
PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"
UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="session")
def node() -> str:
    """Node, with the pinned grpc-js client installed (npm ci, once)."""
    node = shutil.which("node")
    if node is None:
        message = "node is not installed: the grpc-js conformance tests DID NOT RUN"
        print(f"\n*** {message} ***", file=sys.stderr)
        pytest.skip(message)
    if not (CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CLIENT, check=True
        )
    return node


async def grpc_js(node: str, address: str, *args: str) -> dict[str, Any]:
    """What the grpc-js client printed for one command (run beside the daemon's event loop)."""
    process = await asyncio.create_subprocess_exec(
        node,
        str(CLIENT / "client.js"),
        str(PROTO_ROOT),
        address,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(90):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture
async def stub(served: Served) -> Any:
    async with grpc.aio.insecure_channel(served.unix) as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


async def test_a_unary_call(node: str, served: Served, transport: str) -> None:
    answer = await grpc_js(node, served.address(transport), "version")
    assert answer["server_version"] == __version__
    assert answer["api_version"]


async def test_a_conversation_streamed_live_and_replayed(
    node: str, served: Served, transport: str, stub: agent_pb2_grpc.AgentServiceStub
) -> None:
    address = served.address(transport)
    live = await grpc_js(node, address, "converse", str(served.project), PLAIN_PROMPT)
    assert live["headers_first"] is True
    kinds = [event["kind"] for event in live["events"]]
    assert kinds[0] == "session_info"
    assert "text_delta" in kinds
    assert kinds[-1] == "turn_complete"

    replayed = await grpc_js(node, address, "resume", live["session_id"])
    assert replayed["headers_first"] is True
    sequences = [event["sequence"] for event in replayed["events"]]
    assert sequences == list(range(1, len(sequences) + 1))
    # The same stored events as grpcio's client reads.
    request = agent_pb2.ResumeSessionRequest(session_id=live["session_id"])
    expected = await collect(stub.ResumeSession(request))
    assert [(e["sequence"], e["kind"]) for e in replayed["events"]] == [
        (e.sequence, kind(e)) for e in expected
    ][: len(sequences)]
    assert {(e["sequence"], e["kind"]) for e in live["events"]} <= {
        (e.sequence, kind(e)) for e in expected
    }


async def test_an_error_status_with_its_details(
    node: str, served: Served, transport: str, stub: agent_pb2_grpc.AgentServiceStub
) -> None:
    seen = await grpc_js(node, served.address(transport), "unknown", UNKNOWN)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RenameSession(agent_pb2.RenameSessionRequest(session_id=UNKNOWN, name="x"))
    refusal = caught.value
    expected_trailers = dict(refusal.trailing_metadata() or ())
    for status in (seen["unary"], seen["stream"]):
        assert status["code"] == grpc.StatusCode.NOT_FOUND.value[0]
        assert status["details"] == refusal.details()
        trailers = status["trailers"]
        assert trailers["betcode-error-code"] == expected_trailers["betcode-error-code"]
        details = base64.b64decode(trailers["betcode-error-details-bin"])
        assert json.loads(details) == json.loads(expected_trailers["betcode-error-details-bin"])
