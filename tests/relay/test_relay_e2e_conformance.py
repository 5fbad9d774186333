"""The end-to-end scheme as an independent client implements it from docs/RELAY.md ("Scheme,
version 2"), with the cryptography primitives only (nothing of betcode.remote.e2e): through a
real relay (TLS, JWT, NATS) and the real tunnel client to a stand-in daemon that records what
reaches it. The handshake, the key schedule, the header and the associated data must be as
documented, or the daemon refuses the call (or the answer does not open)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from harness.relay import bearer, client_channel, register, register_machine, relay_in_process

from betcode.remote.e2e import DaemonIdentity  # the daemon's side only
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import tunnel_pb2

# As docs/RELAY.md writes them.
SALT = b"betcode-e2e-hkdf-salt-v1"
ONLINE = b"betcode-e2e-v2 online"
SEALED = b"betcode-e2e-v2 sealed"
LABEL = b"betcode-e2e-v2"
RENAME = "betcode.v1.AgentService/RenameSession"


def raw(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


def hkdf(ikm: bytes, info: bytes) -> tuple[ChaCha20Poly1305, ChaCha20Poly1305]:
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=SALT, info=info).derive(ikm)
    return ChaCha20Poly1305(okm[:32]), ChaCha20Poly1305(okm[32:])


def aad(call: int, direction: bytes, counter: int) -> bytes:
    return LABEL + u64(call) + direction + u64(counter) + RENAME.encode()


def seal(key: ChaCha20Poly1305, associated: bytes, plaintext: bytes) -> bytes:
    nonce = os.urandom(12)
    return tunnel_pb2.EncryptedPayload(
        ciphertext=key.encrypt(nonce, plaintext, associated), nonce=nonce
    ).SerializeToString()


def unseal(key: ChaCha20Poly1305, associated: bytes, data: bytes) -> bytes:
    payload = tunnel_pb2.EncryptedPayload.FromString(data)
    return key.decrypt(payload.nonce, payload.ciphertext, associated)


def _raw(data: bytes) -> bytes:
    return data


async def test_an_independent_client_speaks_the_documented_scheme(tmp_path: Path) -> None:
    reached: list[bytes] = []

    async def rename(request: bytes, _context: Any) -> bytes:
        reached.append(request)
        return b"renamed:" + request

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "betcode.v1.AgentService",
                {"RenameSession": grpc.unary_unary_rpc_method_handler(rename, _raw, _raw)},
            ),
        )
    )
    socket = tmp_path / "daemon.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    async with relay_in_process(tmp_path / "relay") as relay, client_channel(relay) as channel:
        account = await register(channel, "alice")
        certs = MachineIdentity(tmp_path / "certs")
        await register_machine(channel, account, "box", certs)
        daemon_identity = DaemonIdentity.load_or_create(certs.e2e_key_file)
        tunnel = TunnelClient(
            TunnelSettings(
                relay_urls=[f"https://127.0.0.1:{relay.tunnel_port}"],
                identity=certs,
                local_target=f"unix:{socket}",
                backoff=Backoff(initial=0.1, maximum=0.5),
                e2e=daemon_identity,
            )
        )
        task = asyncio.create_task(tunnel.run())
        try:
            await asyncio.wait_for(tunnel.connected.wait(), 30)
            routing = (*bearer(account.access), ("x-machine-id", "box"))

            async def call(method: str, body: bytes, *extra: tuple[str, str]) -> bytes:
                multicallable = channel.unary_unary(
                    "/" + method, request_serializer=_raw, response_deserializer=_raw
                )
                answer: bytes = await multicallable(body, metadata=(*routing, *extra))
                return answer

            # Handshake.
            c = X25519PrivateKey.generate()
            big_c = raw(c.public_key())
            request = tunnel_pb2.KeyExchangeRequest(machine_id="box", ephemeral_pubkey=big_c)
            response = tunnel_pb2.KeyExchangeResponse.FromString(
                await call("betcode.v1.AgentService/ExchangeKeys", request.SerializeToString())
            )
            big_i = bytes(response.daemon_identity_pubkey)
            big_d = bytes(response.daemon_ephemeral_pubkey)
            assert len(big_i) == len(big_d) == 32  # what the upstream CLI needs too
            digest = hashlib.sha256(big_i).hexdigest()
            expected = ":".join(digest[n : n + 4] for n in range(0, 64, 4))
            assert response.daemon_fingerprint == expected == daemon_identity.fingerprint
            ikm = c.exchange(X25519PublicKey.from_public_bytes(big_d)) + c.exchange(
                X25519PublicKey.from_public_bytes(big_i)
            )
            c2d, d2c = hkdf(ikm, ONLINE + big_c + big_d + big_i)

            # Two calls, numbered 1 and 2.
            for number in (1, 2):
                header = ("x-betcode-e2e", f"2;s={big_d.hex()};c={number}")
                body = seal(c2d, aad(number, b"c2d", 0), f"name-{number}".encode())
                answer = await call(RENAME, body, header)
                assert (
                    unseal(d2c, aad(number, b"d2c", 0), answer) == f"renamed:name-{number}".encode()
                )
            # Call 1 again: refused.
            header = ("x-betcode-e2e", f"2;s={big_d.hex()};c=1")
            body = seal(c2d, aad(1, b"c2d", 0), b"name-again")
            with pytest.raises(grpc.aio.AioRpcError) as repeated:
                await call(RENAME, body, header)
            assert repeated.value.code() == grpc.StatusCode.UNAUTHENTICATED

            # Sealed to the identity, as for an offline machine.
            s = X25519PrivateKey.generate()
            big_s = raw(s.public_key())
            created = int(time.time())
            c2d, d2c = hkdf(
                s.exchange(X25519PublicKey.from_public_bytes(big_i)),
                SEALED + big_s + big_i + u64(created),
            )
            header = ("x-betcode-e2e", f"2;o={big_s.hex()};t={created};c=1")
            answer = await call(RENAME, seal(c2d, aad(1, b"c2d", 0), b"sealed-name"), header)
            assert unseal(d2c, aad(1, b"d2c", 0), answer) == b"renamed:sealed-name"
            assert reached == [b"name-1", b"name-2", b"sealed-name"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    await server.stop(None)
