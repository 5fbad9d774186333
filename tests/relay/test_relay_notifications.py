"""Attention notifications (TOP-06) to a webhook: a relay in this event loop POSTs to a local
HTTP receiver; the daemon side is the real tunnel client in front of a stand-in daemon whose
ListPendingPermissions answers what the test sets, and a real AttentionLog watching stand-in
sessions that carry a real InputLock. Waiting requests and finished or failed turns are notified
once, at most 5 per hour per session and 20 per day per user (counted together by the relay
instances on one NATS server), never while a client holds the session's input lock, and never
with their content."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import nats
from aiohttp import web
from harness.attention import watched
from harness.relay import client_channel, register, register_machine, relay_in_process

from betcode.relay.nats_server import NatsServer
from betcode.relay.notifications import Notifications, NotifySettings
from betcode.relay.notify_limits import SharedLimits
from betcode.remote.e2e import DaemonIdentity
from betcode.sessions.attention import AttentionLog
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2


class StandIn:
    """A daemon that answers ListPendingPermissions with `pending`, counting the calls."""

    def __init__(self) -> None:
        self.pending: list[agent_pb2.PendingPermission] = []
        self.calls = 0

    async def list_pending(self, _request: bytes, _context: Any) -> bytes:
        self.calls += 1
        return agent_pb2.ListPendingPermissionsResponse(pending=self.pending).SerializeToString()


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    received: list[tuple[str, dict[str, str]]] = []

    async def post(request: web.Request) -> web.Response:
        received.append((await request.text(), dict(request.headers)))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/topic", post)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/topic", received
    finally:
        await runner.cleanup()


async def until(condition: Any, within_s: float = 30.0) -> None:
    async with asyncio.timeout(within_s):
        while not condition():  # noqa: ASYNC110 - plain counters, no event to wait on
            await asyncio.sleep(0.05)


def waiting(request_id: str, session_id: str) -> agent_pb2.PendingPermission:
    return agent_pb2.PendingPermission(
        request_id=request_id, session_id=session_id, tool_name="Bash", description="rm -rf SECRET"
    )


Received = list[tuple[str, dict[str, str]]]


@contextlib.asynccontextmanager
async def relayed(
    tmp_path: Path, stand_in: StandIn, attention: AttentionLog | None = None
) -> AsyncIterator[Received]:
    """A relay notifying the local receiver, and a tunnel to it from the stand-in daemon."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "betcode.v1.AgentService",
                {
                    "ListPendingPermissions": grpc.unary_unary_rpc_method_handler(
                        stand_in.list_pending
                    )
                },
            ),
        )
    )
    socket = tmp_path / "daemon.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    try:
        async with receiver() as (url, received):
            settings = NotifySettings(webhook=url)
            async with relay_in_process(tmp_path / "relay", notify=settings) as relay:
                async with client_channel(relay) as channel:
                    account = await register(channel, "alice")
                    identity = MachineIdentity(tmp_path / "certs")
                    await register_machine(channel, account, "box", identity)
                tunnel = TunnelClient(
                    TunnelSettings(
                        relay_urls=[f"https://127.0.0.1:{relay.tunnel_port}"],
                        identity=identity,
                        local_target=f"unix:{socket}",
                        backoff=Backoff(initial=0.1, maximum=0.5),
                        e2e=DaemonIdentity.load_or_create(identity.e2e_key_file),
                        attention_poll=0.1,
                        attention=attention,
                    )
                )
                task = asyncio.create_task(tunnel.run())
                try:
                    yield received
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
    finally:
        await server.stop(None)


def kinds_of(received: Received, session_id: str) -> list[str]:
    """The kinds notified for the session, in order."""
    return [h["Tags"] for _body, h in received if h["X-BetCode-Session"] == session_id]


async def test_waiting_requests_are_notified_once_within_the_limits(tmp_path: Path) -> None:
    stand_in = StandIn()
    async with relayed(tmp_path, stand_in) as received:
        stand_in.pending = [waiting(f"r{n}", "session-one") for n in range(7)]
        stand_in.pending.append(waiting("q1", "session-two"))
        await until(lambda: len(received) >= 6)
        polls = stand_in.calls
        await until(lambda: stand_in.calls >= polls + 5)  # asked again and again
    # 5 of session one's 7 (5 per hour per session), session two's one; none twice.
    sessions = [headers["X-BetCode-Session"] for _body, headers in received]
    assert sorted(sessions) == ["session-one"] * 5 + ["session-two"]
    assert all("SECRET" not in body and "Bash" not in body for body, _headers in received)
    assert all(body.startswith("box: a tool call waits") for body, _headers in received)


async def test_turn_ends_are_notified_unless_a_client_holds_the_input_lock(
    tmp_path: Path,
) -> None:
    stand_in = StandIn()
    attention = AttentionLog()
    free = watched("session-free", "/home/alice/projects/shop")
    held = watched("session-held", "/home/alice/projects/blog")
    for session in (free, held):
        attention.watch(session)
    assert held.lock.attach("phone")  # a client is at the session: it holds the lock
    async with relayed(tmp_path, stand_in, attention) as received:
        free.end_turn(ok=True)
        await until(lambda: kinds_of(received, "session-free") == ["turn_finished"])
        free.end_turn(ok=False)
        await until(lambda: kinds_of(received, "session-free") == ["turn_finished", "error"])

        held.end_turn(ok=True)
        held.end_turn(ok=False)
        stand_in.pending = [waiting("held-request", "session-held")]
        polls = stand_in.calls
        await until(lambda: stand_in.calls >= polls + 5)  # seen again and again, not notified
        free.end_turn(ok=True)  # announced after the held session's ends, if those were
        await until(lambda: len(kinds_of(received, "session-free")) == 3)
        assert kinds_of(received, "session-held") == []

        held.lock.detach("phone")  # nobody at the session any more: the request still waits
        await until(lambda: kinds_of(received, "session-held") == ["permission"])
        polls = stand_in.calls
        await until(lambda: stand_in.calls >= polls + 5)
    assert kinds_of(received, "session-held") == ["permission"]  # once
    bodies = [body for body, _headers in received]
    assert bodies[:2] == [
        "box: the turn is finished (shop session-)",
        "box: the session stopped with an error (shop session-)",
    ]
    assert all("SECRET" not in body for body in bodies)


async def test_duplicates_and_limits_are_shared_by_the_relay_instances(tmp_path: Path) -> None:
    """Per session 5 an hour, per user 20 a day, an id once, counted together by two relay
    instances on one NATS server (JetStream KV); what a window passed is allowed again. Driven
    with a clock; the posts go to the local receiver."""
    now = [1_000_000.0]
    nats_server = NatsServer(tmp_path / "nats")
    await nats_server.start()
    connections = [await nats.connect(servers=[nats_server.url]) for _ in range(2)]
    try:
        async with receiver() as (url, received):
            relays = [
                Notifications(
                    NotifySettings(webhook=url),
                    limits=await SharedLimits.open(nc, clock=lambda: now[0]),
                )
                for nc in connections
            ]
            turn = [0]

            async def notify(session_id: str, notification_id: str, kind: str = "error") -> bool:
                """Each call on the other relay instance."""
                turn[0] += 1
                params = {
                    "notify": kind,
                    "session_id": session_id,
                    "notification_id": notification_id,
                }
                return await relays[turn[0] % 2].notify("m1", "box", "alice", params)

            try:
                assert await notify("s1", "a")
                assert not await notify("s1", "a")  # the same id again, on the other relay
                sent = [await notify("s1", f"b{n}") for n in range(5)]
                assert sent == [True] * 4 + [False]  # 5 an hour for s1, across both
                now[0] += 3601  # an hour later the session may be notified again
                assert await notify("s1", "c")
                sent = [await notify(f"s-{n}", f"d{n}") for n in range(16)]
                assert sent == [True] * 14 + [False] * 2  # 20 a day for alice
                assert not await notify("s-other", "e")
                now[0] += 86401
                assert await notify("s-other", "f")
                assert not await notify("s-other", "g", kind="conversation")  # no such kind
            finally:
                for relay in relays:
                    await relay.close()
        assert len(received) == 1 + 4 + 1 + 14 + 1
    finally:
        for nc in connections:
            await nc.close()
        await nats_server.stop()
