#!/usr/bin/env python3
"""Prints test vectors of the end-to-end scheme, version 2 (docs/RELAY.md), made by the Python
implementation (betcode.remote.e2e) from fixed keys and nonces: the web client's own
implementation (web-client/src/e2e.ts) is tested against them with `node --test`
(web-client/test/e2e.test.ts). tests/unit/test_e2e_vectors.py checks that the committed
web-client/test/e2e-vectors.json is what this prints, so the two cannot drift apart.

    .venv/bin/python scripts/e2e_vectors.py > web-client/test/e2e-vectors.json
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from betcode.remote import e2e

CLIENT_EPHEMERAL = bytes(range(1, 33))
DAEMON_EPHEMERAL = bytes(range(33, 65))
DAEMON_IDENTITY = bytes(range(65, 97))
METHOD = "betcode.v1.AgentService/Converse"
MESSAGES = [b"\x0a\x05hello", b"", bytes(range(256)) * 3]


def _nonce(call: int, direction: str, counter: int) -> bytes:
    return bytes([call, ord(direction[0]), counter]) * 4


def _public(secret: bytes) -> bytes:
    return e2e.raw_public(X25519PrivateKey.from_private_bytes(secret).public_key())


SEALED_CREATED = 1_790_000_000


def sealed_vectors(identity_public: bytes) -> dict[str, Any]:
    """A sealed session (for a machine that is offline): the client's ephemeral key and the
    time are fixed; its first call's header and first request."""
    client_public = _public(CLIENT_EPHEMERAL)
    shared = X25519PrivateKey.from_private_bytes(CLIENT_EPHEMERAL).exchange(
        X25519PrivateKey.from_private_bytes(DAEMON_IDENTITY).public_key()
    )
    keys = e2e.sealed_keys(shared, client_public, identity_public, SEALED_CREATED)
    cipher = e2e.CallCipher(keys, 1, METHOD, daemon_side=False)
    nonce = _nonce(1, "c2d", 0)
    with mock.patch.object(e2e.os, "urandom", return_value=nonce):
        sealed = cipher.seal(MESSAGES[0]).hex()
    header = e2e.Header(1, client_ephemeral=client_public, created=SEALED_CREATED).value()
    return {
        "created": SEALED_CREATED,
        "header": header,
        "plaintext": MESSAGES[0].hex(),
        "c2d": sealed,
    }


def vectors() -> dict[str, Any]:
    client = X25519PrivateKey.from_private_bytes(CLIENT_EPHEMERAL)
    client_public = _public(CLIENT_EPHEMERAL)
    daemon_public = _public(DAEMON_EPHEMERAL)
    identity_public = _public(DAEMON_IDENTITY)
    keys = e2e.online_keys(
        client.exchange(X25519PrivateKey.from_private_bytes(DAEMON_EPHEMERAL).public_key()),
        client.exchange(X25519PrivateKey.from_private_bytes(DAEMON_IDENTITY).public_key()),
        client_public,
        daemon_public,
        identity_public,
    )
    calls = []
    for call in (1, 2):
        to_daemon = e2e.CallCipher(keys, call, METHOD, daemon_side=False)
        to_client = e2e.CallCipher(keys, call, METHOD, daemon_side=True)
        messages = []
        for counter, plaintext in enumerate(MESSAGES):
            sealed = {}
            for direction, cipher in (("c2d", to_daemon), ("d2c", to_client)):
                nonce = _nonce(call, direction, counter)
                with mock.patch.object(e2e.os, "urandom", return_value=nonce):
                    sealed[direction] = cipher.seal(plaintext).hex()
            messages.append({"plaintext": plaintext.hex(), **sealed})
        header = e2e.Header(call, daemon_ephemeral=daemon_public).value()
        calls.append({"call": call, "header": header, "messages": messages})
    return {
        "sealed": sealed_vectors(identity_public),
        "method": METHOD,
        "client_ephemeral_secret": CLIENT_EPHEMERAL.hex(),
        "client_ephemeral_public": client_public.hex(),
        "daemon_ephemeral_public": daemon_public.hex(),
        "daemon_identity_public": identity_public.hex(),
        "daemon_fingerprint": e2e.fingerprint(identity_public),
        "calls": calls,
        "nonces": "bytes([call, first letter of the direction, counter]) * 4",
    }


if __name__ == "__main__":
    print(json.dumps(vectors(), indent=2))
