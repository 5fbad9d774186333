"""Attention notifications (TOP-06) from a daemon's waiting requests to a webhook: a relay in
this event loop POSTs to a local HTTP receiver; the daemon side is the real tunnel client in
front of a stand-in daemon whose ListPendingPermissions answers what the test sets. Each
waiting request is notified once, at most 5 per hour per session, and without its content."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from aiohttp import web
from harness.relay import client_channel, register, register_machine, relay_in_process

from betcode.relay.notifications import NotifySettings
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.e2e import DaemonIdentity
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


async def test_waiting_requests_are_notified_once_within_the_limits(tmp_path: Path) -> None:
    stand_in = StandIn()
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
                )
            )
            task = asyncio.create_task(tunnel.run())
            try:
                stand_in.pending = [waiting(f"r{n}", "session-one") for n in range(7)]
                stand_in.pending.append(waiting("q1", "session-two"))
                await until(lambda: len(received) >= 6)
                polls = stand_in.calls
                await until(lambda: stand_in.calls >= polls + 5)  # asked again and again
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        # 5 of session one's 7 (5 per hour per session), session two's one; none twice.
        sessions = [headers["X-BetCode-Session"] for _body, headers in received]
        assert sorted(sessions) == ["session-one"] * 5 + ["session-two"]
        assert all("SECRET" not in body and "Bash" not in body for body, _headers in received)
        assert all(body.startswith("box: a tool call waits") for body, _headers in received)
    await server.stop(None)
