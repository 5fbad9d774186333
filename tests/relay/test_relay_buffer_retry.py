"""How the relay's buffer treats a daemon's answer to a buffered call: "not now" (UNAVAILABLE)
keeps the call and tries it again with backoff, nothing overtaking it; a refusal is final and
the call is deleted, never delivered again. A relay in this event loop (its own nats-server);
the machine's side is a stand-in that opens a real tunnel with the machine's certificate and
answers each delivered call as scripted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from harness.relay import (
    MACHINE,
    BetcodeUser,
    RelayProcess,
    bearer,
    client_channel,
    register,
    register_machine,
    relay_in_process,
    tunnel_channel,
)

from betcode.relay.auth_service import Registration
from betcode.relay.buffer import BufferSettings
from betcode.relay.server import Relay
from betcode.remote import frames
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
    tunnel_pb2,
    tunnel_pb2_grpc,
)

CANCEL = "betcode.v1.AgentService/CancelTurn"
RENAME = "betcode.v1.AgentService/RenameSession"


class StandInMachine:
    """Answers each delivered call, at its end, with the next of its method's `answers`
    (a status code; OK ends the call with one empty response), recording the methods."""

    def __init__(self, answers: dict[str, list[grpc.StatusCode]]) -> None:
        self.answers = answers
        self.delivered: list[str] = []
        self.outgoing: asyncio.Queue[tunnel_pb2.TunnelFrame] = asyncio.Queue()

    async def frames_out(self) -> AsyncIterator[tunnel_pb2.TunnelFrame]:
        while True:
            yield await self.outgoing.get()

    async def serve(self, relay: Relay, key: bytes, cert: bytes) -> None:
        methods: dict[str, str] = {}
        async with tunnel_channel(relay, key, cert) as channel:
            call = tunnel_pb2_grpc.TunnelServiceStub(channel).OpenTunnel(self.frames_out())
            async for frame in call:
                if frame.frame_type == frames.REQUEST:
                    methods[frame.request_id] = frames.full_method(frame.stream_data.method)
                elif frame.frame_type == frames.STREAM_END:
                    method = methods.pop(frame.request_id)
                    self.delivered.append(method)
                    await self.answer(frame.request_id, self.answers[method].pop(0))

    async def answer(self, request_id: str, code: grpc.StatusCode) -> None:
        if code == grpc.StatusCode.OK:
            await self.outgoing.put(frames.data_frame(request_id, b"", 1))
            await self.outgoing.put(frames.end_frame(request_id))
        else:
            await self.outgoing.put(frames.error_frame(request_id, code, f"scripted {code.name}"))


async def buffered(call: object) -> str:
    """The place the relay's receipt names."""
    with pytest.raises(grpc.aio.AioRpcError) as offline:
        await call  # type: ignore[misc]
    assert offline.value.code() == grpc.StatusCode.UNAVAILABLE
    return str(dict(offline.value.trailing_metadata() or ())[BUFFERED_TRAILER])


async def test_a_call_answered_not_now_is_kept_and_retried_and_a_refused_one_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = BufferSettings(retry_initial_seconds=0.2, retry_max_seconds=0.4)
    async with (
        # Open registration: a second user asks too.
        relay_in_process(
            tmp_path / "relay", buffer=settings, registration=Registration.OPEN
        ) as relay,
        client_channel(relay) as channel,
    ):
        alice = await register(channel, "alice")
        machine = await register_machine(channel, alice, MACHINE)
        agent = agent_pb2_grpc.AgentServiceStub(channel)
        metadata = (*bearer(alice.access), ("x-machine-id", MACHINE))
        rename_place = await buffered(
            agent.RenameSession(
                agent_pb2.RenameSessionRequest(session_id="s", name="n"), metadata=metadata
            )
        )
        await buffered(
            agent.CancelTurn(agent_pb2.CancelTurnRequest(session_id="s"), metadata=metadata)
        )
        assert relay.buffer is not None
        assert len(await relay.buffer.pending(MACHINE)) == 2

        stand_in = StandInMachine(
            {
                # The daemon is not ready for it twice (e.g. stopping), then takes it.
                CANCEL: [grpc.StatusCode.UNAVAILABLE] * 2 + [grpc.StatusCode.OK],
                # A final refusal: never delivered again.
                RENAME: [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.OK],
            }
        )
        caplog.set_level(logging.INFO, logger="betcode.relay.buffer")
        serving = asyncio.create_task(stand_in.serve(relay, machine.key, machine.cert))
        try:
            async with asyncio.timeout(30):
                while await relay.buffer.pending(MACHINE):  # noqa: ASYNC110 - JetStream state
                    await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # more than the retry delays: a wrong retry would show
            assert stand_in.delivered == [CANCEL, CANCEL, CANCEL, RENAME]
            # The refusal is logged under the place its caller was given, and the caller
            # (only its owner) can ask what became of that place.
            assert f"(place {rename_place}) refused, dropped: scripted" in caplog.text
            machines = machine_pb2_grpc.MachineServiceStub(channel)
            asked = await machines.ListDroppedRequests(
                machine_pb2.ListDroppedRequestsRequest(machine_id=MACHINE),
                metadata=bearer(alice.access),
            )
            assert [(d.place, d.method, d.code) for d in asked.dropped] == [
                (rename_place, RENAME, "UNAUTHENTICATED")
            ]
            assert asked.dropped[0].reason == "scripted UNAUTHENTICATED"
            bob = await register(channel, "bob")
            with pytest.raises(grpc.aio.AioRpcError) as other:
                await machines.ListDroppedRequests(
                    machine_pb2.ListDroppedRequestsRequest(machine_id=MACHINE),
                    metadata=bearer(bob.access),
                )
            assert other.value.code() == grpc.StatusCode.NOT_FOUND
            # The same from the command line.
            cli = BetcodeUser(
                RelayProcess(relay.options.files.root, url=f"https://127.0.0.1:{relay.port}"),
                tmp_path / "client-config",
                tmp_path,
            )
            assert (await cli.run("auth", "login", "-u", "alice")).code == 0
            shown = await cli.run("machine", "dropped", MACHINE)
            assert shown.code == 0, shown.err
            assert f"place {rename_place} " in shown.out
            assert "RenameSession: UNAUTHENTICATED: scripted UNAUTHENTICATED" in shown.out
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)


async def test_a_tunnel_that_ends_while_its_delivery_waits_to_retry_lets_the_next_one_deliver(
    tmp_path: Path,
) -> None:
    """The delivery waits out its backoff (here a minute) after a "not now"; the machine's
    tunnel ends and a new one opens: the new tunnel's delivery does not wait for that backoff
    (one delivery per machine at a time), it delivers at once."""
    settings = BufferSettings(retry_initial_seconds=60.0, retry_max_seconds=60.0)
    async with (
        relay_in_process(tmp_path / "relay", buffer=settings) as relay,
        client_channel(relay) as channel,
    ):
        alice = await register(channel, "alice")
        machine = await register_machine(channel, alice, MACHINE)
        agent = agent_pb2_grpc.AgentServiceStub(channel)
        metadata = (*bearer(alice.access), ("x-machine-id", MACHINE))
        await buffered(
            agent.CancelTurn(agent_pb2.CancelTurnRequest(session_id="s"), metadata=metadata)
        )
        assert relay.buffer is not None

        first = StandInMachine({CANCEL: [grpc.StatusCode.UNAVAILABLE]})
        serving = asyncio.create_task(first.serve(relay, machine.key, machine.cert))
        async with asyncio.timeout(30):
            while first.delivered != [CANCEL]:  # noqa: ASYNC110 - the stand-in's record
                await asyncio.sleep(0.05)
        serving.cancel()  # this tunnel ends; its delivery waits out its minute
        await asyncio.gather(serving, return_exceptions=True)

        second = StandInMachine({CANCEL: [grpc.StatusCode.OK]})
        serving = asyncio.create_task(second.serve(relay, machine.key, machine.cert))
        try:
            async with asyncio.timeout(30):
                while await relay.buffer.pending(MACHINE):  # noqa: ASYNC110 - JetStream state
                    await asyncio.sleep(0.1)
            assert second.delivered == [CANCEL]
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
