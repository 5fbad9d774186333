"""A machine's proof of its certificate in call metadata, for the clients' port: gRPC's Python
server cannot ask for a client certificate without requiring one, so the port clients use
(TLS, no client certificate) cannot check one in the handshake. A daemon dialing that port
sends its certificate and an ECDSA-SHA256 signature, with the machine key, over a statement
naming the purpose and the time; the relay checks the certificate as the tunnel port's TLS
would (issued by the relay's CA, in date; then its serial) and the signature, and accepts it
for 5 minutes. The statement travels inside TLS to the relay, so only the relay sees it."""

from __future__ import annotations

import base64
import binascii
import datetime
import time
from collections.abc import Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

CERT_KEY = "x-betcode-machine-cert"
PROOF_KEY = "x-betcode-machine-proof"
STATEMENT = "betcode-tunnel-v1"
MAX_SKEW_SECONDS = 300


class ProofRefused(Exception):
    pass


def _statement(stamp: int) -> bytes:
    return f"{STATEMENT}|{stamp}".encode()


def proof_metadata(
    key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, *, now: float | None = None
) -> tuple[tuple[str, str], ...]:
    stamp = int(time.time() if now is None else now)
    signature = key.sign(_statement(stamp), ec.ECDSA(hashes.SHA256()))
    der = cert.public_bytes(serialization.Encoding.DER)
    return (
        (CERT_KEY, base64.b64encode(der).decode()),
        (PROOF_KEY, f"{stamp}.{base64.b64encode(signature).decode()}"),
    )


def check_issued(cert: x509.Certificate, ca: x509.Certificate) -> None:
    """Issued by the relay's CA and in date (ProofRefused, saying which, otherwise)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as error:
        raise ProofRefused(f"the certificate is not issued by this relay ({error})") from None
    now = datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise ProofRefused("the machine certificate has expired; register the machine again")


def proven_certificate(
    metadata: Mapping[str, str], ca: x509.Certificate, *, now: float | None = None
) -> x509.Certificate:
    """The certificate a caller proved it holds the key of; ProofRefused otherwise."""
    encoded, proof = metadata.get(CERT_KEY), metadata.get(PROOF_KEY)
    if not encoded or not proof:
        raise ProofRefused(
            "no client certificate: run `betcode machine register` first (or dial the relay's "
            "daemon port)"
        )
    try:
        cert = x509.load_der_x509_certificate(base64.b64decode(encoded, validate=True))
        stamp_text, signature_text = proof.split(".", 1)
        stamp, signature = int(stamp_text), base64.b64decode(signature_text, validate=True)
    except (ValueError, binascii.Error):
        raise ProofRefused("a malformed machine proof") from None
    check_issued(cert, ca)
    if abs((time.time() if now is None else now) - stamp) > MAX_SKEW_SECONDS:
        raise ProofRefused("the machine proof is stale (or the machine's clock is off)")
    public = cert.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise ProofRefused("the machine certificate's key is not an EC key")
    try:
        public.verify(signature, _statement(stamp), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ProofRefused("the machine proof's signature does not match its certificate") from None
    return cert
