"""The endpoints of signing in (`devices`): a one-time link or pairing code exchanged for a
device credential (anyone with the link or code); any signed-in client's: the list of devices
and revocation; and the owner's: new links and codes, and the notice of a rotated access
token."""

from __future__ import annotations

from aiohttp import web

from betcode.core.validation import check_id
from betcode.storage.web_devices import WebDevice
from betcode.web.access import principal, relay_device
from betcode.web.devices import Devices, TooManyGuesses
from betcode.web.errors import json_body, refusal, text_field

DEVICES_KEY = web.AppKey("devices", Devices)
LINK_REFUSED = (
    "this sign-in link was used already or has expired (links work once, for minutes): run "
    "`betcode web` on the machine running the daemon for a new one"
)
CODE_REFUSED = (
    "this pairing code is wrong, used already or expired (codes work once, for minutes): run "
    "`betcode web pair` on the machine running the daemon for a new one"
)


def device_routes() -> list[web.RouteDef]:
    return [
        web.post("/api/devices/pair", pair),
        web.get("/api/whoami", whoami),
        web.post("/api/links", new_link),
        web.post("/api/pairing-codes", new_code),
        web.get("/api/devices", list_devices),
        web.delete("/api/devices/{device_id}", revoke),
        web.post("/api/rotate", rotated),
    ]


async def pair(request: web.Request) -> web.Response:
    """`{"link", "name"}` or `{"code", "name"}`: the device's credential, once."""
    body = await json_body(request)
    devices = request.app[DEVICES_KEY]
    name = text_field(body, "name")
    relay_device_id = relay_device(request)
    if "code" in body:
        try:
            paired = await devices.pair_code(text_field(body, "code"), name, relay_device_id)
        except TooManyGuesses as refused:
            response = refusal(429, "TOO_MANY_GUESSES", str(refused))
            response.headers["Retry-After"] = str(max(1, round(refused.retry_after)))
            return response
        if paired is None:
            return refusal(401, "CODE_REFUSED", CODE_REFUSED)
    else:
        paired = await devices.pair(text_field(body, "link"), name, relay_device_id)
        if paired is None:
            return refusal(401, "LINK_REFUSED", LINK_REFUSED)
    device, credential = paired
    return web.json_response(
        {"device_id": device.device_id, "name": device.name, "credential": credential}, status=201
    )


async def whoami(request: web.Request) -> web.Response:
    who = principal(request)
    return web.json_response({"id": who.id, "name": who.name})


async def new_link(request: web.Request) -> web.Response:
    secret, expires_at = await request.app[DEVICES_KEY].new_link()
    return web.json_response({"link": secret, "expires_at": expires_at}, status=201)


async def new_code(request: web.Request) -> web.Response:
    code, expires_at = await request.app[DEVICES_KEY].new_code()
    return web.json_response({"code": code, "expires_at": expires_at}, status=201)


async def list_devices(request: web.Request) -> web.Response:
    devices = request.app[DEVICES_KEY]
    listed = await devices.list()
    return web.json_response({"devices": [_device_json(d, devices.current(d)) for d in listed]})


def _device_json(device: WebDevice, current: bool) -> dict[str, object]:
    return {
        "device_id": device.device_id,
        "name": device.name,
        "created_at": device.created_at,
        "last_seen_at": device.last_seen_at,
        "revoked_at": device.revoked_at,
        "signed_in": current,
    }


async def revoke(request: web.Request) -> web.Response:
    device_id = check_id(request.match_info["device_id"], "device_id")
    revoked = await request.app[DEVICES_KEY].revoke(device_id)
    if not revoked:
        message = f"no signed-in device {device_id!r} (`betcode web devices` lists them)"
        return refusal(404, "DEVICE_NOT_FOUND", message)
    return web.json_response({"revoked": True})


async def rotated(request: web.Request) -> web.Response:
    """`betcode web rotate-token` wrote a new token (this request carries it): every stream is
    closed now rather than at the watcher's next look."""
    return web.json_response({"closed": await request.app[DEVICES_KEY].token_changed()})
