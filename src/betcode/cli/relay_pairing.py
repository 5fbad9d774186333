"""`betcode web pair` through the relay: the machine asks its relay for a pairing ticket (as
itself: its certificate and a fresh proof, as its tunnel does) and shows, with the daemon's own
pairing code, `https://RELAY/#pair=TICKET.CODE&machine=ID&key=KEY` as a QR code: the phone
that opens it is logged in to the relay as a device of this machine's owner, reaching this
machine only, pins the machine's end-to-end key from the QR code, then trades the code for the
daemon's device credential (docs/RELAY.md "Pairing a phone through the relay")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio

from betcode.remote.e2e import DaemonIdentity
from betcode.remote.frames import relay_target
from betcode.remote.machine_proof import proof_metadata
from betcode.tunnel.identity import MachineIdentity, RelayAddress
from betcode.v1 import machine_pb2, machine_pb2_grpc


class TicketUnavailable(Exception):
    """The relay gave no ticket (unreachable, or the machine's certificate refused)."""


def pairing_ticket(
    identity: MachineIdentity, relay: RelayAddress
) -> machine_pb2.CreatePairingTicketResponse:
    root = Path(relay.ca_file).read_bytes() if relay.ca_file else None
    proof = proof_metadata(identity.private_key(), identity.certificate())

    async def ask() -> machine_pb2.CreatePairingTicketResponse:
        async with grpc.aio.secure_channel(
            relay_target(relay.url), grpc.ssl_channel_credentials(root_certificates=root)
        ) as channel:
            reply: machine_pb2.CreatePairingTicketResponse = (
                await machine_pb2_grpc.MachineServiceStub(channel).CreatePairingTicket(
                    machine_pb2.CreatePairingTicketRequest(),
                    metadata=proof,
                    timeout=30,
                )
            )
            return reply

    try:
        return asyncio.run(ask())
    except grpc.aio.AioRpcError as error:
        raise TicketUnavailable(
            f"the relay at {relay.url} gave no pairing ticket: {error.details() or error.code()}"
        ) from None


def browser_address(relay_url: str) -> str:
    """The relay's client address as a browser opens it (the relay serves browsers there)."""
    url = relay_url.rstrip("/")
    return url if "://" in url else f"https://{url}"


def machine_key(identity: MachineIdentity) -> bytes:
    """The machine's end-to-end identity key (its daemon made it; made here if it never ran
    with the relay, in the file the daemon then uses)."""
    return DaemonIdentity.load_or_create(identity.e2e_key_file).public


def pairing_url(base: str, ticket: str, code: str, machine_id: str, key: bytes) -> str:
    return f"{base}/#pair={ticket}.{code}&machine={machine_id}&key={key.hex()}"


def typed_form(ticket: str, code: str) -> str:
    """What a person types instead of scanning: the ticket, then the daemon's code."""
    return f"{ticket[:5]}-{ticket[5:]}-{code[:4]}-{code[4:]}"
