"""Who may use the relay, as tables of what is allowed and refused, against real relays in this
event loop (SQLite accounts, their own nats-server): registration open / invite / closed with
codes from `betcode relay invite`, machines per user, buffered requests and bytes per user
(JetStream enforces them), and the audit of relayed calls (the token's user, whatever id the
client claims)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from harness.relay import (
    Account,
    bearer,
    betcode_argv,
    client_channel,
    register_machine,
    relay_in_process,
    until,
)

from betcode.relay.accounts import Accounts
from betcode.relay.auth_service import Registration, invite_hash
from betcode.relay.buffer import ERROR_CODE_TRAILER, BufferSettings
from betcode.relay.server import Relay
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import auth_pb2, auth_pb2_grpc, machine_pb2, machine_pb2_grpc

OK = "OK"
RENAME = "/betcode.v1.AgentService/RenameSession"


def _raw(data: bytes) -> bytes:
    return data


async def sign_up(channel: grpc.aio.Channel, name: str, invite: str = "") -> str:
    """OK, or the refusal's status name."""
    try:
        await auth_pb2_grpc.AuthServiceStub(channel).Register(
            auth_pb2.RegisterRequest(username=name, password="pw-123456", invite_code=invite)
        )
    except grpc.aio.AioRpcError as error:
        return str(error.code().name)
    return OK


async def invite_code(relay: Relay, *args: str) -> str:
    """`betcode relay invite` on the relay's host, as its operator runs it."""
    process = await asyncio.create_subprocess_exec(
        *betcode_argv("relay", "invite", "--dir", str(relay.options.files.root), *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            Registration.OPEN,
            {"owner": OK, "stranger": OK, "invited": OK, "bad code": OK, "code again": OK},
        ),
        (
            Registration.INVITE,
            {
                "owner": OK,  # the first account: freely
                "stranger": "PERMISSION_DENIED",
                "invited": OK,
                "bad code": "PERMISSION_DENIED",
                "code again": "PERMISSION_DENIED",  # a one-use code, used
            },
        ),
        (
            Registration.CLOSED,
            {
                "owner": "PERMISSION_DENIED",
                "stranger": "PERMISSION_DENIED",
                "invited": "PERMISSION_DENIED",
                "bad code": "PERMISSION_DENIED",
                "code again": "PERMISSION_DENIED",
            },
        ),
    ],
)
async def test_registration_modes(
    tmp_path: Path, mode: Registration, expected: dict[str, str]
) -> None:
    async with relay_in_process(tmp_path / "relay", registration=mode) as relay:
        code = await invite_code(relay)
        async with client_channel(relay) as channel:
            seen = {
                "owner": await sign_up(channel, "owner"),
                "stranger": await sign_up(channel, "stranger"),
                "invited": await sign_up(channel, "invited", code),
                "bad code": await sign_up(channel, "guesser", "not-a-code"),
                "code again": await sign_up(channel, "second", code),
            }
    assert seen == expected


async def test_invitation_codes(tmp_path: Path) -> None:
    """Uses, expiry, and a use given back when the name was taken."""
    async with relay_in_process(tmp_path / "relay") as relay, client_channel(relay) as channel:
        assert await sign_up(channel, "owner") == OK
        assert relay.database is not None
        accounts = Accounts(relay.database)
        now = time.time()
        await accounts.add_invite(invite_hash("expired-code"), now - 100, now - 1, 5)
        two = await invite_code(relay, "--uses", "2")
        seen = {
            "expired": await sign_up(channel, "late", "expired-code"),
            "taken name": await sign_up(channel, "owner", two),  # gives its use back
            "first use": await sign_up(channel, "ann", two),
            "second use": await sign_up(channel, "ben", two),
            "third use": await sign_up(channel, "cid", two),
        }
    assert seen == {
        "expired": "PERMISSION_DENIED",
        "taken name": "ALREADY_EXISTS",
        "first use": OK,
        "second use": OK,
        "third use": "PERMISSION_DENIED",
    }
    stored = (tmp_path / "relay" / "accounts.db").read_bytes()
    assert two.encode() not in stored  # only its hash is kept


async def register_user(channel: grpc.aio.Channel, name: str) -> Account:
    reply = await auth_pb2_grpc.AuthServiceStub(channel).Register(
        auth_pb2.RegisterRequest(username=name, password="pw-123456")
    )
    return Account(reply.user_id, reply.access_token, reply.refresh_token)


async def machine_status(channel: grpc.aio.Channel, account: Account, machine_id: str) -> str:
    try:
        await register_machine(channel, account, machine_id)
    except grpc.aio.AioRpcError as error:
        return f"{error.code().name}: {error.details()}"
    return OK


async def test_machines_per_user(tmp_path: Path) -> None:
    async with (
        relay_in_process(
            tmp_path / "relay", registration=Registration.OPEN, machines_per_user=2
        ) as relay,
        client_channel(relay) as channel,
    ):
        alice = await register_user(channel, "alice")
        bob = await register_user(channel, "bob")
        seen = [
            ("alice", "a1", await machine_status(channel, alice, "a1")),
            ("alice", "a2", await machine_status(channel, alice, "a2")),
            ("alice", "a3", await machine_status(channel, alice, "a3")),
            ("alice", "a1 again", await machine_status(channel, alice, "a1")),
            ("bob", "b1", await machine_status(channel, bob, "b1")),
        ]
        await machine_pb2_grpc.MachineServiceStub(channel).RemoveMachine(
            machine_pb2.RemoveMachineRequest(machine_id="a2"), metadata=bearer(alice.access)
        )
        seen.append(("alice", "a3 after removing a2", await machine_status(channel, alice, "a3")))
    assert seen == [
        ("alice", "a1", OK),
        ("alice", "a2", OK),
        (
            "alice",
            "a3",
            "RESOURCE_EXHAUSTED: machine quota reached: 2 machines per user on this relay; "
            "remove one first (`betcode machine remove ID`)",
        ),
        ("alice", "a1 again", OK),  # re-registering is not a new machine
        ("bob", "b1", OK),
        ("alice", "a3 after removing a2", OK),
    ]


async def buffer(
    channel: grpc.aio.Channel, account: Account, machine_id: str, body: bytes = b"x"
) -> str:
    """A request for an offline machine: "buffered", or the refusal's error code trailer."""
    call: Any = channel.unary_unary(RENAME, request_serializer=_raw, response_deserializer=_raw)
    try:
        await call(
            body,
            metadata=(
                *bearer(account.access),
                ("x-machine-id", machine_id),
                ("x-relay-user-id", "mallory"),  # a client's claim: never believed
            ),
        )
    except grpc.aio.AioRpcError as error:
        trailers = dict(error.trailing_metadata() or ())
        if error.code() == grpc.StatusCode.UNAVAILABLE and BUFFERED_TRAILER in trailers:
            return "buffered"
        return str(trailers.get(ERROR_CODE_TRAILER, error.code().name))
    raise AssertionError("an offline machine answered")


async def test_buffered_requests_per_machine_and_per_user(tmp_path: Path) -> None:
    settings = BufferSettings(max_per_machine=3, max_per_user=4)
    async with (
        relay_in_process(
            tmp_path / "relay", registration=Registration.OPEN, buffer=settings
        ) as relay,
        client_channel(relay) as channel,
    ):
        alice = await register_user(channel, "alice")
        bob = await register_user(channel, "bob")
        for account, machine_id in ((alice, "a1"), (alice, "a2"), (bob, "b1")):
            await register_machine(channel, account, machine_id)
        seen = [await buffer(channel, alice, "a1") for _ in range(4)]
        seen += [await buffer(channel, alice, "a2") for _ in range(2)]
        seen += [await buffer(channel, bob, "b1")]
        assert relay.database is not None
        accounts = Accounts(relay.database)

        async def all_audited() -> bool:  # written as each call ends
            return len(await accounts.relayed_calls()) == len(seen)

        await until(all_audited)
        audited = await accounts.relayed_calls()
    assert seen == [
        *["buffered"] * 3,
        "BUFFER_FULL",  # a1's 3
        "buffered",
        "BUFFER_QUOTA",  # alice's 4, over her machines
        "buffered",  # bob has his own
    ]
    assert [(row[1], row[2], row[3], row[4]) for row in audited] == [
        *[(alice.user_id, "a1", RENAME[1:], "UNAVAILABLE")] * 3,
        (alice.user_id, "a1", RENAME[1:], "RESOURCE_EXHAUSTED"),
        (alice.user_id, "a2", RENAME[1:], "UNAVAILABLE"),
        (alice.user_id, "a2", RENAME[1:], "RESOURCE_EXHAUSTED"),
        (bob.user_id, "b1", RENAME[1:], "UNAVAILABLE"),
    ]


async def test_buffered_bytes_per_user(tmp_path: Path) -> None:
    settings = BufferSettings(max_message_bytes=10_000, max_bytes_per_user=30_000)
    async with (
        relay_in_process(tmp_path / "relay", buffer=settings) as relay,
        client_channel(relay) as channel,
    ):
        alice = await register_user(channel, "alice")
        await register_machine(channel, alice, "a1")
        seen = [await buffer(channel, alice, "a1", b"x" * 8000) for _ in range(4)]
    assert seen == ["buffered"] * 3 + ["BUFFER_QUOTA"]
