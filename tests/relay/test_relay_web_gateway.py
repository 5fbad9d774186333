"""The web client through the relay: WebGatewayService calls sealed end to end (scheme v2, the
Python client the CLI uses; web-client/src/e2e.ts matches it byte for byte) through a real relay
(its own nats-server) to a real daemon whose LAN web listener is off, against the real CLI. A
device signed in earlier lists sessions, starts one, streams it, types into it and allows its
tool call; another device revokes it and its stream closes; NATS carries no plaintext of any of
it. An offline machine is told at once, nothing buffered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.message import DecodeError
from harness.environment import Workspace
from harness.relay import Carried, Rig, rig_fixture
from harness.web import sign_in
from harness.web_gateway import GatewayClient, GatewaySocket

from betcode.config.settings import HttpSettings
from betcode.devtools.fake_claude import make_fake_claude
from betcode.relay import fragments
from betcode.relay.buffer import BufferSettings
from betcode.relay.routing import inbox_subject
from betcode.remote import frames
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import tunnel_pb2
from betcode.web.token import token_path

pytestmark = pytest.mark.real_cli

PROMPT_SECRET = "gateway-prompt-3131"
ANSWER_SECRET = "gateway-answer-8585"
TOOL_SECRET = "6 * 7919"
TOOL_PROMPT = (
    f'SCN:tool_bash {{"command": "python3 -c \\"print({TOOL_SECRET})\\""}} {PROMPT_SECRET}'
)
PLAIN_PROMPT = f'SCN:plain {{"text": "{ANSWER_SECRET}"}} {PROMPT_SECRET}'
TOOL_OUTPUT = str(6 * 7919)
SECRETS = tuple(s.encode() for s in (PROMPT_SECRET, ANSWER_SECRET, TOOL_SECRET, TOOL_OUTPUT))

BIG_ANSWER = 10_000_000

rig = pytest.fixture(rig_fixture(BufferSettings()))


def lan(rig: Rig, listen: str) -> None:
    settings = replace(rig.config.settings, http=HttpSettings(listen=listen))
    rig.config = replace(rig.config, settings=settings)


async def signed_in_devices(rig: Rig, *names: str) -> list[dict[str, Any]]:
    """Devices signed in on the LAN (a link from the owner), before the listener is turned off."""
    lan(rig, "127.0.0.1:0")
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    assert rig.daemon.web.url is not None
    token = token_path(rig.config.config_dir).read_text().strip()
    devices = [await sign_in(rig.daemon.web.url, token, name) for name in names]
    await rig.stop_daemon()
    lan(rig, "")
    return devices


def through_relay(rig: Rig, device: dict[str, Any], client_id: str) -> GatewayClient:
    return GatewayClient(rig.sealed, device["credential"], client_id, rig.metadata)


def stored_decisions(rig: Rig) -> list[tuple[str, dict[str, str]]]:
    with sqlite3.connect(rig.config.database_path) as db:
        rows = db.execute(
            "SELECT actor_id, context FROM audit_log WHERE event_type = 'permission_grant'"
        ).fetchall()
    return [(actor, json.loads(context)) for actor, context in rows]


async def test_the_web_client_through_the_relay_with_the_lan_listener_off(
    rig: Rig, workspace: Workspace
) -> None:
    phone_device, laptop_device = await signed_in_devices(rig, "phone", "laptop")
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    assert rig.daemon.web.url is None  # no LAN listener
    assert rig.config.web_gateway_socket.stat().st_mode & 0o777 == 0o600
    assert rig.relay.nc is not None
    carried = Carried(rig.relay.nc, [], [])
    await carried.watch(">")
    phone = through_relay(rig, phone_device, "web-phone")
    laptop = through_relay(rig, laptop_device, "web-laptop")

    status, listed = await phone.call("GET", "/api/sessions")
    assert (status, listed["sessions"]) == (200, [])
    status, body = await through_relay(rig, {"credential": ""}, "web-x").call(
        "GET", "/api/sessions"
    )
    assert (status, body["error"]["code"]) == (401, "UNAUTHENTICATED")
    session_id = await phone.create_session(str(workspace.repo))

    # The stream: typed into, a tool call allowed through Fetch, run once.
    stream = await phone.stream(session_id)
    await asyncio.wait_for(stream.caught_up.wait(), 60)
    await stream.say(TOOL_PROMPT)
    request = await stream.wait_for("permission_request")
    assert TOOL_SECRET in request["input"]["command"]
    status, waiting = await laptop.call("GET", "/api/permissions")
    assert [w["request_id"] for w in waiting["waiting"]] == [request["request_id"]]
    answered = await phone.answer(request["request_id"], decision="allow_once")
    assert answered["outcome"] == "allowed", answered
    results = await stream.wait_for("tool_call_result")
    assert TOOL_OUTPUT in results["output"]
    await stream.wait_for("turn_complete")
    await stream.say(PLAIN_PROMPT)
    await stream.until(lambda: ANSWER_SECRET in json.dumps(stream.events) or None)
    await stream.wait_for("turn_complete", count=2)
    assert len(stream.of_kind("tool_call_result")) == 1
    assert stored_decisions(rig) == [
        (
            "web-phone",
            {"request_id": request["request_id"], "decision": "allow_once", "via": "relay"},
        )
    ]

    # History replayed to a new stream; then the phone is revoked from the laptop: its open
    # stream closes at once, its next request is refused.
    replayed = await laptop.stream(session_id)
    await asyncio.wait_for(replayed.caught_up.wait(), 60)
    assert replayed.sequences[: len(stream.sequences)] == stream.sequences
    status, _ = await laptop.call("DELETE", f"/api/devices/{phone_device['device_id']}")
    assert status == 200
    await asyncio.wait_for(stream.closed(), 10)
    assert stream.socket.close_code == 4401
    assert (await phone.call("GET", "/api/sessions"))[0] == 401
    await replayed.close()

    await carried.subscription.unsubscribe()
    assert any(subject.startswith("betcode.machine.") for subject in carried.subjects)
    leaks = [secret for secret in SECRETS for payload in carried.payloads if secret in payload]
    assert leaks == []
    assert not any(session_id.encode() in payload for payload in carried.payloads)


async def test_an_offline_machine_is_told_at_once_and_nothing_is_buffered(rig: Rig) -> None:
    """The machine never came online: a page asking it anything is told UNAVAILABLE at once
    (it shows the machine offline), not queued like a buffered AgentService call."""
    assert rig.relay.nc is not None
    carried = Carried(rig.relay.nc, [], [])
    await carried.watch("betcode.held.>")
    phone = through_relay(rig, {"credential": "a-device-credential"}, "web-phone")
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as offline:
        await phone.fetch("POST", "/api/sessions", {"working_directory": "/tmp"})
    assert offline.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "offline" in (offline.value.details() or "")
    assert BUFFERED_TRAILER not in dict(offline.value.trailing_metadata() or ())
    stream = await phone.stream("any-session")
    await stream.closed()
    assert isinstance(stream.socket, GatewaySocket)
    assert await stream.socket.call.code() is grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 5.0
    await carried.subscription.unsubscribe()
    assert carried.subjects == []  # nothing kept for the machine's return


async def test_a_message_over_what_nats_carries_crosses_the_relay_whole_in_slices(
    rig: Rig, workspace: Workspace, tmp_path: Path
) -> None:
    """A message over NATS's max_payload (8 MiB here) crosses the relay whole either way, sliced
    (relay/fragments.py) and still sealed: a 10 MB message typed into the page's relayed stream
    reaches the daemon whole (which refuses a prompt so long, giving its size), a 10 MB answer
    (the fake claude's one assistant line, under the daemon's 10 MiB) reaches the stream, which
    goes on. Before, each ended its call with RESOURCE_EXHAUSTED. Over the relay's limit, a
    message is still refused so, and the machine stays online."""
    script = {
        "turns": [
            [{"do": "big_line", "bytes": BIG_ANSWER}],
            [{"do": "text", "text": "after the big answer"}],
        ]
    }
    rig.config = replace(rig.config, claude_bin=str(make_fake_claude(tmp_path / "fake", script)))
    [device] = await signed_in_devices(rig, "phone")
    await rig.start_daemon()
    carried = Carried(rig.relay.nc, [], [])
    await carried.watch("betcode.>")
    phone = through_relay(rig, device, "web-phone")
    async with asyncio.timeout(30):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await phone.fetch("POST", "/api/sessions", "x" * (frames.MAX_FRAME_BYTES + 1))
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    session_id = await phone.create_session(str(workspace.repo))  # still online

    stream = await phone.stream(session_id)
    await asyncio.wait_for(stream.caught_up.wait(), 60)
    big_request = PROMPT_SECRET * (BIG_ANSWER // len(PROMPT_SECRET))
    started = time.monotonic()
    await stream.say(big_request)
    # A prompt is limited to 1 MiB: the daemon's answer gives the size it received, whole.
    refused_prompt = await stream.wait_for("error")
    print(f"\n10 MB request through the relay, answered: {time.monotonic() - started:.2f} s")
    assert f"is {len(big_request)} bytes" in json.dumps(refused_prompt)
    started = time.monotonic()
    await stream.say("a long answer, please")
    await stream.until(
        lambda: (
            any(len(d.get("text", "")) == BIG_ANSWER for d in stream.of_kind("text_delta")) or None
        )
    )
    print(f"10 MB event through the relay: {time.monotonic() - started:.2f} s")
    await stream.wait_for("turn_complete")
    await stream.say("and a short one")
    await stream.wait_for("turn_complete", count=2)
    said = "".join(delta.get("text", "") for delta in stream.of_kind("text_delta"))
    assert said.endswith("after the big answer")
    assert isinstance(stream.socket, GatewaySocket)
    await stream.socket.close()
    await asyncio.wait_for(stream.closed(), 10)
    replayed = await phone.stream(session_id)  # a page reconnecting: the history, whole
    await asyncio.wait_for(replayed.caught_up.wait(), 60)
    assert replayed.sequences[: len(stream.sequences)] == stream.sequences
    assert any(len(d.get("text", "")) == BIG_ANSWER for d in replayed.of_kind("text_delta"))
    await replayed.socket.close()
    await asyncio.wait_for(replayed.closed(), 10)
    await carried.subscription.unsubscribe()
    assert rig.relay.nc is not None
    assert max(len(p) for p in carried.payloads) <= rig.relay.nc.max_payload
    assert sum(len(p) for p in carried.payloads) > 2 * BIG_ANSWER  # both big ones, sliced
    assert not [p for p in carried.payloads if PROMPT_SECRET.encode() in p]


async def test_slices_over_the_limit_end_their_call_and_the_machine_stays_online(
    rig: Rig, workspace: Workspace
) -> None:
    """A relay instance on NATS that sends a call's answer in slices past the limit
    (frames.MAX_FRAME_BYTES) is refused, not buffered: the call ends RESOURCE_EXHAUSTED."""
    [device] = await signed_in_devices(rig, "phone")
    await rig.start_daemon()
    phone = through_relay(rig, device, "web-phone")
    session_id = await phone.create_session(str(workspace.repo))
    opened: asyncio.Queue[tunnel_pb2.TunnelFrame] = asyncio.Queue()

    async def on_machine(msg: Any) -> None:
        frame = tunnel_pb2.TunnelFrame()
        with contextlib.suppress(DecodeError):
            frame.ParseFromString(msg.data)
            if frame.frame_type == frames.REQUEST and msg.headers:
                opened.put_nowait(frame)

    nc = rig.relay.nc
    assert nc is not None
    spy = await nc.subscribe("betcode.machine.>", cb=on_machine)
    stream = await phone.stream(session_id)
    await asyncio.wait_for(stream.caught_up.wait(), 60)
    socket_call = await asyncio.wait_for(opened.get(), 10)
    await spy.unsubscribe()
    inbox = inbox_subject(rig.relay.options.relay_id)  # the router of the phone's call
    size = nc.max_payload - fragments.HEADROOM_BYTES
    for _ in range(frames.MAX_FRAME_BYTES // size + 1):
        part = {fragments.PART_HEADER: f"{socket_call.request_id} more"}
        await nc.publish(inbox, b"\0" * size, headers=part)
    await asyncio.wait_for(stream.closed(), 30)
    assert isinstance(stream.socket, GatewaySocket)
    assert await stream.socket.call.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    status, listed = await phone.call("GET", "/api/sessions")
    assert (status, [s["id"] for s in listed["sessions"]]) == (200, [session_id])
