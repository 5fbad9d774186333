"""One Web Push POST (RFC 8030), as both senders make it: the daemon for the subscriptions of
its LAN devices (betcode.push), and the relay for those of devices that reach the machine
through it (relay/push_delivery.py), handed a message the daemon encrypted and signed
(v1 PushDelivery). Which endpoints may be POSTed to, and the headers that may go with it, are
the same rule for both."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp

MAX_ENDPOINT_CHARS = 2048
# The headers of a Web Push message (RFC 8030 section 5, RFC 8291, RFC 8292); nothing else is
# sent, so a relay POSTing what a daemon hands it adds nothing and forwards nothing more.
HEADERS = ("authorization", "content-encoding", "ttl", "urgency", "topic")
CONTENT_ENCODING = "aes128gcm"
# A push service takes at least 4096 bytes of payload (RFC 8030 section 7.2); with the
# aes128gcm header and padding a message stays well under this.
MAX_BODY_BYTES = 8192
GONE = (404, 410)  # the push service dropped the subscription


class EndpointRefused(ValueError):
    """The endpoint may not be POSTed to; the message says why."""


class PushNotPosted(Exception):
    """The message was not handed to the push service; the message says why."""


class RelayUnreachable(PushNotPosted):
    """The daemon could not hand the message to its relay (the tunnel is down, the call
    failed): worth sending again once the relay is back."""


def check_endpoint(endpoint: object, *, allow_loopback: bool, loopback_switch: str) -> str:
    """https, or plain http to a loopback IP address with a port when `allow_loopback` (a
    refusal names `loopback_switch`, the setting or flag that admits it)."""
    if not isinstance(endpoint, str) or not endpoint:
        raise EndpointRefused("endpoint must be the push service's URL")
    if len(endpoint) > MAX_ENDPOINT_CHARS:
        raise EndpointRefused(f"endpoint is longer than {MAX_ENDPOINT_CHARS} characters")
    try:
        url = urlsplit(endpoint)
        port = url.port
    except ValueError as error:
        raise EndpointRefused(f"endpoint {endpoint!r} is not a URL: {error}") from None
    if url.scheme == "https" and url.hostname:
        return endpoint
    if url.scheme == "http" and _is_loopback_ip(url.hostname) and port is not None:
        if allow_loopback:
            return endpoint
        raise EndpointRefused(
            f"endpoint {endpoint!r} is plain http; a loopback push service is admitted only "
            f"with {loopback_switch}"
        )
    raise EndpointRefused(f"endpoint {endpoint!r} must be an https URL")


def _is_loopback_ip(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def message_problem(body: bytes, headers: Mapping[str, str]) -> str | None:
    """Why this is not an encrypted, VAPID-signed push message (None when it is one)."""
    if len(body) > MAX_BODY_BYTES:
        return f"the body is {len(body)} bytes, more than {MAX_BODY_BYTES}"
    if headers.get("content-encoding") != CONTENT_ENCODING:
        return f"content-encoding must be {CONTENT_ENCODING}"
    if not headers.get("authorization", "").startswith("vapid t="):
        return "authorization must be a VAPID one (vapid t=..., k=...)"
    if not headers.get("ttl", "").isdigit():
        return "ttl must be a number of seconds"
    return None


async def post(
    http: aiohttp.ClientSession, endpoint: str, body: bytes, headers: Mapping[str, str]
) -> int:
    """POSTs one message; the push service's HTTP status. Raises PushNotPosted when it could
    not be reached. A redirect is not followed (a push service does not send one)."""
    kept = {name: value for name, value in headers.items() if name in HEADERS}
    try:
        async with http.post(endpoint, data=body, headers=kept, allow_redirects=False) as answer:
            await answer.read()
            return answer.status
    except (aiohttp.ClientError, TimeoutError) as error:
        raise PushNotPosted(str(error) or type(error).__name__) from None
