"""Backpressure through the relay: a daemon that streams faster than its client reads is paced
by credit (the client's relay grants more as its caller reads), so a slow reader receives
everything instead of being dropped, and no queue on the way grows past its bound. A relay in
this event loop, the real tunnel client, a stand-in daemon streaming as fast as it can."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from harness.relay import bearer, client_channel, register, register_machine, relay_in_process

from betcode.relay.routing import CALL_QUEUE_FRAMES
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity

MESSAGES = 3 * CALL_QUEUE_FRAMES  # more than any queue between daemon and client holds


async def flood(request: bytes, _context: Any) -> Any:
    for index in range(struct.unpack(">I", request)[0]):
        yield struct.pack(">I", index) + b"x" * 8192  # 25 MB in all: more than gRPC buffers


async def test_a_slow_reader_gets_every_message(tmp_path: Path) -> None:
    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(flood)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "betcode.v1.AgentService", {"ResumeSession": handler}
            ),
        )
    )
    socket = tmp_path / "daemon.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    async with relay_in_process(tmp_path / "relay") as relay, client_channel(relay) as channel:
        account = await register(channel, "alice")
        identity = MachineIdentity(tmp_path / "certs")
        await register_machine(channel, account, "box", identity)
        tunnel = TunnelClient(
            TunnelSettings(
                relay_urls=[f"https://127.0.0.1:{relay.tunnel_port}"],
                identity=identity,
                local_target=f"unix:{socket}",
                backoff=Backoff(initial=0.1, maximum=0.5),
                allow_unencrypted=True,  # the pacing is under test, not the encryption
            )
        )
        task = asyncio.create_task(tunnel.run())
        try:
            await asyncio.wait_for(tunnel.connected.wait(), 30)
            call = channel.unary_stream("/betcode.v1.AgentService/ResumeSession")(
                struct.pack(">I", MESSAGES),
                metadata=(*bearer(account.access), ("x-machine-id", "box")),
            )
            received: list[int] = []
            async for message in call:
                if not received:
                    await asyncio.sleep(5.0)  # a slow reader: everything else piles up
                received.append(struct.unpack(">I", message[:4])[0])
            assert received == list(range(MESSAGES))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    await server.stop(None)
