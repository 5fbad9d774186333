"""PushRelayService: Web Push for the devices that reach a machine through this relay. The
machine's daemon encrypts each message to the subscription's keys and signs it with its VAPID
key; the relay gets only what it must POST (endpoint, ciphertext, the Web Push headers:
remote/web_push.py), POSTs it and answers the push service's status (404 and 410: the daemon
forgets the subscription). It never sees a payload in clear, and has none to log.

What it refuses, so that a compromised daemon cannot make it a spammer: a caller that is not a
registered machine (its current certificate, as the tunnel checks it); an endpoint that is not
https (`relay start --push-allow-loopback` admits http://127.0.0.1:PORT, for tests and a push
service on the relay's own host); a message that is not an encrypted, VAPID-signed one; and
more than `per_user_per_hour` / `per_user_per_day` messages for the machines of one user,
counted by every relay instance on the NATS cluster together (relay/notify_limits.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import grpc.aio
from cryptography import x509

from betcode.relay.accounts import Accounts
from betcode.relay.tunnels import proven_machine
from betcode.remote.attention_limits import NotifyLimits
from betcode.remote.web_push import (
    EndpointRefused,
    PushNotPosted,
    check_endpoint,
    message_problem,
    post,
)
from betcode.v1 import push_relay_pb2, push_relay_pb2_grpc

log = logging.getLogger(__name__)

POST_TIMEOUT_SECONDS = 10.0
# An honest daemon pushes at most 100 requests a day (each once more when answered) and 20
# turn ends, to each of a user's devices: a few devices fit well under these.
PER_USER_PER_HOUR = 300
PER_USER_PER_DAY = 2000


@dataclass(frozen=True)
class PushRelaySettings:
    allow_loopback: bool = False  # relay start --push-allow-loopback
    per_user_per_hour: int = PER_USER_PER_HOUR
    per_user_per_day: int = PER_USER_PER_DAY


class PushRelay(push_relay_pb2_grpc.PushRelayServiceServicer):
    def __init__(
        self,
        settings: PushRelaySettings,
        accounts: Accounts,
        ca: x509.Certificate,
        limits: NotifyLimits,
    ) -> None:
        self._settings = settings
        self._accounts = accounts
        self._ca = ca
        self._limits = limits
        self._http: aiohttp.ClientSession | None = None

    async def Deliver(
        self, request: push_relay_pb2.PushDelivery, context: grpc.aio.ServicerContext
    ) -> push_relay_pb2.PushDeliveryResult:
        machine = await proven_machine(context, self._ca, self._accounts)
        headers = {name.lower(): value for name, value in request.headers.items()}
        try:
            check_endpoint(
                request.endpoint,
                allow_loopback=self._settings.allow_loopback,
                loopback_switch="relay start --push-allow-loopback",
            )
        except EndpointRefused as refused:
            return self._refused(machine.machine_id, str(refused))
        problem = message_problem(request.body, headers)
        if problem is not None:
            return self._refused(machine.machine_id, problem)
        user = f"push-user:{machine.owner_id}"
        if not await self._limits.admit(
            [
                (user + ":hour", 3600.0, self._settings.per_user_per_hour),
                (user + ":day", 86400.0, self._settings.per_user_per_day),
            ]
        ):
            return self._refused(
                machine.machine_id,
                f"the relay's push limit for this user is reached "
                f"({self._settings.per_user_per_hour} an hour, "
                f"{self._settings.per_user_per_day} a day)",
            )
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_SECONDS)
            )
        host = urlsplit(request.endpoint).netloc
        try:
            status = await post(self._http, request.endpoint, request.body, headers)
        except PushNotPosted as error:
            return self._refused(machine.machine_id, f"push service {host} not reached: {error}")
        log.info("push for machine %s to %s: %d", machine.machine_id, host, status)
        return push_relay_pb2.PushDeliveryResult(status=status)

    def _refused(self, machine_id: str, why: str) -> push_relay_pb2.PushDeliveryResult:
        log.warning("push for machine %s not sent: %s", machine_id, why)
        return push_relay_pb2.PushDeliveryResult(refused=why)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
