"""End-to-end encryption between a client and a daemon over the relay (SEC-13).

The daemon has a long-lived X25519 identity key (``<config dir>/certs/e2e.key``, 0600); its
fingerprint is what clients pin on first use. A client makes one ephemeral X25519 key per
connection; both sides derive two ChaCha20-Poly1305 keys (one per direction) with HKDF-SHA256
from the X25519 secret. Every message of every relayed call travels as an ``EncryptedPayload``
(ciphertext, random 12-byte nonce, the client's ephemeral public key), its associated data the
gRPC method and the direction, so the relay can neither read, alter nor move a message to
another method. No handshake round trip is needed per call, so a call buffered for an offline
machine is encrypted too. The ephemeral public key also rides in the call's metadata
(``x-betcode-e2e``) so the daemon knows the keys before the first message."""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from betcode.remote.owner_only import write_private
from betcode.v1 import tunnel_pb2

E2E_METADATA_KEY = "x-betcode-e2e"
NONCE_BYTES = 12
INFO = b"betcode.v1 e2e"
TO_DAEMON = b"c2d"
TO_CLIENT = b"d2c"
CACHED_PEERS = 256


class E2EError(Exception):
    """A message that does not decrypt (tampered, replayed into another method, wrong key)."""


def raw_public(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: bytes) -> str:
    """SHA-256 of the identity public key, as 16 groups of 4 hex digits."""
    digest = hashlib.sha256(public_key).hexdigest()
    return ":".join(digest[i : i + 4] for i in range(0, len(digest), 4))


@dataclass(frozen=True)
class Keys:
    to_daemon: ChaCha20Poly1305
    to_client: ChaCha20Poly1305


def _derive(shared: bytes, client_ephemeral: bytes, daemon_identity: bytes) -> Keys:
    material = HKDF(
        algorithm=hashes.SHA256(), length=64, salt=client_ephemeral + daemon_identity, info=INFO
    ).derive(shared)
    return Keys(ChaCha20Poly1305(material[:32]), ChaCha20Poly1305(material[32:]))


def _seal(cipher: ChaCha20Poly1305, aad: bytes, plaintext: bytes, ephemeral: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    payload = tunnel_pb2.EncryptedPayload(
        ciphertext=cipher.encrypt(nonce, plaintext, aad), nonce=nonce, ephemeral_pubkey=ephemeral
    )
    return payload.SerializeToString()


def _open(cipher: ChaCha20Poly1305, aad: bytes, data: bytes) -> bytes:
    payload = tunnel_pb2.EncryptedPayload()
    try:
        payload.ParseFromString(data)
        return cipher.decrypt(payload.nonce, payload.ciphertext, aad)
    except (InvalidTag, ValueError, Exception) as error:
        raise E2EError(f"a message failed to decrypt ({type(error).__name__})") from None


class ClientSession:
    """The client's side for one connection: encrypts requests, decrypts responses."""

    def __init__(self, daemon_identity: bytes) -> None:
        ephemeral = X25519PrivateKey.generate()
        self.ephemeral_public = raw_public(ephemeral.public_key())
        shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(daemon_identity))
        self._keys = _derive(shared, self.ephemeral_public, daemon_identity)

    @property
    def metadata_value(self) -> str:
        return self.ephemeral_public.hex()

    def seal(self, method: str, plaintext: bytes) -> bytes:
        return _seal(
            self._keys.to_daemon, method.encode() + TO_DAEMON, plaintext, self.ephemeral_public
        )

    def open(self, method: str, data: bytes) -> bytes:
        return _open(self._keys.to_client, method.encode() + TO_CLIENT, data)


class DaemonIdentity:
    """The daemon's identity key and the keys of the clients it has seen lately."""

    def __init__(self, key: X25519PrivateKey) -> None:
        self._key = key
        self.public = raw_public(key.public_key())
        self.fingerprint = fingerprint(self.public)
        self._peers: OrderedDict[bytes, Keys] = OrderedDict()

    @classmethod
    def load_or_create(cls, path: Path) -> DaemonIdentity:
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, X25519PrivateKey):
                raise E2EError(f"{path} is not an X25519 key")
            return cls(key)
        key = X25519PrivateKey.generate()
        write_private(
            path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cls(key)

    def keys_for(self, metadata_value: str) -> Keys:
        try:
            ephemeral = bytes.fromhex(metadata_value)
            peer = X25519PublicKey.from_public_bytes(ephemeral)
        except ValueError:
            raise E2EError("the call's ephemeral key is malformed") from None
        keys = self._peers.get(ephemeral)
        if keys is None:
            keys = _derive(self._key.exchange(peer), ephemeral, self.public)
            self._peers[ephemeral] = keys
            if len(self._peers) > CACHED_PEERS:
                self._peers.popitem(last=False)
        return keys

    @staticmethod
    def open_request(keys: Keys, method: str, data: bytes) -> bytes:
        return _open(keys.to_daemon, method.encode() + TO_DAEMON, data)

    @staticmethod
    def seal_response(keys: Keys, method: str, plaintext: bytes) -> bytes:
        return _seal(keys.to_client, method.encode() + TO_CLIENT, plaintext, b"")
