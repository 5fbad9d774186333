"""The daemon's VAPID key pair (RFC 8292): made once, kept as PEM, mode 0600, in the config
directory. Push services tie a subscription to the public key the page subscribed with, so
replacing the key orphans every subscription: it is never rotated silently."""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from betcode.remote.owner_only import write_private

KEY_FILE = "push-vapid-key.pem"


class VapidKey:
    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        self.private_key = private_key

    @classmethod
    def load_or_create(cls, config_dir: Path) -> VapidKey:
        path = config_dir / KEY_FILE
        try:
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except FileNotFoundError:
            key = cls(ec.generate_private_key(ec.SECP256R1()))
            write_private(path, key.private_pem())
            return key
        if not isinstance(loaded, ec.EllipticCurvePrivateKey) or not isinstance(
            loaded.curve, ec.SECP256R1
        ):
            raise ValueError(f"{path} is not a P-256 private key")
        return cls(loaded)

    def private_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def public_key_base64url(self) -> str:
        """The uncompressed point, base64url without padding: the page's
        `applicationServerKey`, and the `k` of every VAPID Authorization header."""
        raw = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
