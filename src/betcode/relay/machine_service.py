"""MachineService: a user's machines (SEC-04: only their owner sees or touches them). Register
signs the machine's CSR (``metadata["csr_pem"]``) and answers its certificate and the relay's
CA in the returned machine's metadata (``certificate_pem``, ``ca_pem``)."""

from __future__ import annotations

import json
import re
import time

import grpc

from betcode.relay.accounts import Accounts, Machine, MachineTaken
from betcode.relay.auth_service import abort, caller_claims, timestamp
from betcode.relay.pairing import TICKET_SECONDS, new_ticket
from betcode.relay.tokens import Claims, TokenIssuer
from betcode.relay.tunnels import proven_machine
from betcode.remote.pki import Authority, cert_pem, serial_hex
from betcode.v1 import machine_pb2, machine_pb2_grpc

MACHINE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CSR_KEY = "csr_pem"
CERTIFICATE_KEY = "certificate_pem"
CA_KEY = "ca_pem"
TUNNEL_PORT_KEY = "tunnel_port"  # where this relay's daemons dial (same host as the clients')
MAX_METADATA_ENTRIES = 32
MAX_METADATA_CHARS = 1024


def machine_info(machine: Machine) -> machine_pb2.MachineInfo:
    return machine_pb2.MachineInfo(
        machine_id=machine.machine_id,
        name=machine.name,
        owner_id=machine.owner_id,
        status=(
            machine_pb2.MACHINE_STATUS_ONLINE
            if machine.online_relay
            else machine_pb2.MACHINE_STATUS_OFFLINE
        ),
        registered_at=timestamp(machine.registered_at),
        last_seen=timestamp(machine.last_seen),
        metadata=json.loads(machine.metadata_json),
    )


DEFAULT_MACHINES_PER_USER = 20


class MachineService(machine_pb2_grpc.MachineServiceServicer):
    def __init__(
        self,
        accounts: Accounts,
        issuer: TokenIssuer,
        authority: Authority,
        machines_per_user: int = DEFAULT_MACHINES_PER_USER,
    ) -> None:
        self._accounts = accounts
        self._issuer = issuer
        self._authority = authority
        self._machines_per_user = machines_per_user
        self.tunnel_port = 0  # set once the relay listens

    async def RegisterMachine(
        self, request: machine_pb2.RegisterMachineRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.RegisterMachineResponse:
        claims = await _full_login(context, self._issuer)
        if not MACHINE_ID.match(request.machine_id):
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "machine_id: 1-64 characters of letters, digits, '.', '_' or '-'",
            )
        metadata = dict(request.metadata)
        csr = metadata.pop(CSR_KEY, "")
        if len(metadata) > MAX_METADATA_ENTRIES or any(
            len(k) + len(v) > MAX_METADATA_CHARS for k, v in metadata.items()
        ):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "metadata too large")
        if not csr:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata[{CSR_KEY!r}] must hold the machine's certificate request (PEM)",
            )
        await self._within_quota(context, claims.user_id, request.machine_id)
        try:
            cert = self._authority.machine_certificate(csr.encode(), request.machine_id)
        except ValueError as error:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad CSR: {error}")
            raise AssertionError from None
        now = time.time()
        machine = Machine(
            request.machine_id,
            request.name or request.machine_id,
            claims.user_id,
            json.dumps(metadata, sort_keys=True),
            serial_hex(cert),
            now,
            now,
            "",
        )
        try:
            await self._accounts.register_machine(machine)
        except MachineTaken:
            await abort(
                context,
                grpc.StatusCode.ALREADY_EXISTS,
                f"machine {request.machine_id!r} belongs to another user",
            )
        info = machine_info(machine)
        info.metadata[CERTIFICATE_KEY] = cert_pem(cert).decode()
        info.metadata[CA_KEY] = cert_pem(self._authority.cert).decode()
        if self.tunnel_port:
            info.metadata[TUNNEL_PORT_KEY] = str(self.tunnel_port)
        return machine_pb2.RegisterMachineResponse(machine=info)

    async def _within_quota(
        self, context: grpc.aio.ServicerContext, user_id: str, machine_id: str
    ) -> None:
        """A new machine beyond the user's quota is refused (re-registering one is not)."""
        existing = await self._accounts.machine(machine_id)
        if existing is not None and existing.owner_id == user_id:
            return
        if await self._accounts.machine_count(user_id) >= self._machines_per_user:
            await abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"machine quota reached: {self._machines_per_user} machines per user on this "
                "relay; remove one first (`betcode machine remove ID`)",
            )

    async def ListMachines(
        self, request: machine_pb2.ListMachinesRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.ListMachinesResponse:
        claims = await caller_claims(context, self._issuer)
        infos = [
            machine_info(m)
            for m in await self._accounts.machines_of(claims.user_id)
            if claims.machine_ids is None or m.machine_id in claims.machine_ids
        ]
        if request.status_filter:
            infos = [info for info in infos if info.status == request.status_filter]
        total = len(infos)
        page = infos[request.offset :]
        if request.limit:
            page = page[: request.limit]
        return machine_pb2.ListMachinesResponse(machines=page, total=total)

    async def _owned(
        self, machine_id: str, context: grpc.aio.ServicerContext, claims: Claims
    ) -> Machine:
        machine = await self._accounts.machine(machine_id)
        # Another user's machine, or one the token does not reach, is reported exactly like a
        # missing one (no probing of ids).
        if (
            machine is None
            or machine.owner_id != claims.user_id
            or (claims.machine_ids is not None and machine_id not in claims.machine_ids)
        ):
            await abort(context, grpc.StatusCode.NOT_FOUND, f"no machine {machine_id!r}")
            raise AssertionError
        return machine

    async def GetMachine(
        self, request: machine_pb2.GetMachineRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.GetMachineResponse:
        claims = await caller_claims(context, self._issuer)
        return machine_pb2.GetMachineResponse(
            machine=machine_info(await self._owned(request.machine_id, context, claims))
        )

    async def ListDroppedRequests(
        self, request: machine_pb2.ListDroppedRequestsRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.ListDroppedRequestsResponse:
        """The caller's buffered requests for its machine that the machine refused for good
        (docs/RELAY.md "A machine that is offline")."""
        claims = await caller_claims(context, self._issuer)
        machine = await self._owned(request.machine_id, context, claims)
        dropped = await self._accounts.dropped_requests(claims.user_id, machine.machine_id)
        return machine_pb2.ListDroppedRequestsResponse(
            dropped=[
                machine_pb2.DroppedRequest(
                    place=row.place,
                    method=row.method,
                    code=row.code,
                    reason=row.reason,
                    dropped_at=timestamp(row.at),
                )
                for row in dropped
            ]
        )

    async def RemoveMachine(
        self, request: machine_pb2.RemoveMachineRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.RemoveMachineResponse:
        claims = await _full_login(context, self._issuer)
        machine = await self._owned(request.machine_id, context, claims)
        removed = await self._accounts.remove_machine(
            machine.machine_id, machine.owner_id, time.time()
        )
        return machine_pb2.RemoveMachineResponse(removed=removed)

    async def CreatePairingTicket(
        self, request: machine_pb2.CreatePairingTicketRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.CreatePairingTicketResponse:
        machine = await proven_machine(context, self._authority.cert, self._accounts)
        return machine_pb2.CreatePairingTicketResponse(
            ticket=await new_ticket(self._accounts, machine),
            machine_id=machine.machine_id,
            expires_in_secs=TICKET_SECONDS,
        )

    async def RevokePairedDevice(
        self, request: machine_pb2.RevokePairedDeviceRequest, context: grpc.aio.ServicerContext
    ) -> machine_pb2.RevokePairedDeviceResponse:
        """The machine's daemon revoked the device credential of a phone paired through the
        relay: that phone's device login, if it is this machine's, goes too."""
        machine = await proven_machine(context, self._authority.cert, self._accounts)
        revoked = await self._accounts.revoke_device(
            request.device_id, machine.owner_id, time.time(), machine.machine_id
        )
        return machine_pb2.RevokePairedDeviceResponse(revoked=revoked is not None)


async def _full_login(context: grpc.aio.ServicerContext, issuer: TokenIssuer) -> Claims:
    """The caller's claims, from a login that reaches all of the account's machines: a
    device's (one machine) neither registers nor removes machines."""
    claims = await caller_claims(context, issuer)
    if claims.machine_ids is not None:
        await abort(
            context,
            grpc.StatusCode.PERMISSION_DENIED,
            "this login is a paired device's, for one machine: log in with the account",
        )
    return claims
