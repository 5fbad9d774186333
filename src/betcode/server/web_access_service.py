"""WebAccessService: the owner's sign-ins to the web client (links, pairing codes, the devices
listed and revoked) on the daemon's own socket, whose permissions admit only the owner, so that
`betcode web` and `web pair` work whether or not the web client has a LAN address (a daemon that
only dials a relay has none). It makes nothing itself: it asks the web client's device store
(`betcode.web.devices.Devices`, handed over once the web client starts), the same calls its
`/api/links`, `/api/pairing-codes` and `/api/devices` handlers make. A call the daemon's tunnel
made for the relay is refused: sign-ins are made on the machine (docs/WEB.md#access)."""

from __future__ import annotations

from typing import Protocol

import grpc

from betcode.core.validation import check_id
from betcode.remote.frames import RELAYED_METADATA
from betcode.server.errors import abort, handles_errors
from betcode.storage.web_devices import WebDevice
from betcode.v1 import web_access_pb2

FROM_AFAR = "sign-ins are made on the machine itself (`betcode web`), not through a relay"
NOT_STARTED = "the web client is starting; try again in a moment"


class SignIns(Protocol):
    """What the web client's device store offers the owner."""

    async def new_link(self) -> tuple[str, float]: ...
    async def new_code(self) -> tuple[str, float]: ...
    async def list(self) -> list[WebDevice]: ...
    def current(self, device: WebDevice) -> bool: ...
    async def revoke(self, device_id: str) -> bool: ...


class WebAccessService:
    def __init__(self) -> None:
        self._sign_ins: SignIns | None = None

    def attach(self, sign_ins: SignIns) -> None:
        """The web client's device store, once it started (the service is served before)."""
        self._sign_ins = sign_ins

    async def _store(self, context: grpc.aio.ServicerContext) -> SignIns:
        if any(key == RELAYED_METADATA for key, _ in context.invocation_metadata() or ()):
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, FROM_AFAR)
        if self._sign_ins is None:
            await abort(context, grpc.StatusCode.UNAVAILABLE, NOT_STARTED)
        return self._sign_ins

    async def CreateSignIn(
        self, request: web_access_pb2.CreateSignInRequest, context: grpc.aio.ServicerContext
    ) -> web_access_pb2.CreateSignInResponse:
        store = await self._store(context)
        if request.kind == web_access_pb2.SIGN_IN_KIND_LINK:
            secret, expires_at = await store.new_link()
        elif request.kind == web_access_pb2.SIGN_IN_KIND_PAIRING_CODE:
            secret, expires_at = await store.new_code()
        else:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "kind: a link or a code")
        return web_access_pb2.CreateSignInResponse(secret=secret, expires_at=expires_at)

    async def ListWebDevices(
        self, request: web_access_pb2.ListWebDevicesRequest, context: grpc.aio.ServicerContext
    ) -> web_access_pb2.ListWebDevicesResponse:
        store = await self._store(context)
        return web_access_pb2.ListWebDevicesResponse(
            devices=[
                web_access_pb2.WebDevice(
                    device_id=device.device_id,
                    name=device.name,
                    created_at=device.created_at,
                    last_seen_at=device.last_seen_at or 0.0,
                    revoked_at=device.revoked_at or 0.0,
                    signed_in=store.current(device),
                )
                for device in await store.list()
            ]
        )

    @handles_errors
    async def RevokeWebDevice(
        self, request: web_access_pb2.RevokeWebDeviceRequest, context: grpc.aio.ServicerContext
    ) -> web_access_pb2.RevokeWebDeviceResponse:
        store = await self._store(context)
        device_id = check_id(request.device_id, "device_id")
        if not await store.revoke(device_id):
            message = f"no signed-in device {device_id!r} (`betcode web devices` lists them)"
            await abort(context, grpc.StatusCode.NOT_FOUND, message)
        return web_access_pb2.RevokeWebDeviceResponse()
