"""The relay's certificate authority: its own CA, its server certificate, and the machines'
client certificates (CN = machine id) signed from the machines' CSRs. Private keys of machines
never leave their machine."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = datetime.timedelta(days=3650)
SERVER_LIFETIME = datetime.timedelta(days=825)
MACHINE_CERT_LIFETIME = datetime.timedelta(days=365)  # SEC-03


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "BetCode relay"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls) -> Authority:
        key = new_key()
        name = _name("BetCode relay CA")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> Authority:
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_file}: not an EC private key")
        return cls(key, x509.load_pem_x509_certificate(cert_file.read_bytes()))

    def _signed(
        self,
        builder: x509.CertificateBuilder,
        usage: x509.ObjectIdentifier,
        lifetime: datetime.timedelta,
    ) -> x509.Certificate:
        return (
            builder.issuer_name(self.cert.subject)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + lifetime)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def server_certificate(
        self, key: ec.EllipticCurvePrivateKey, hosts: Sequence[str]
    ) -> x509.Certificate:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0]))
            .public_key(key.public_key())
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
        )
        return self._signed(builder, ExtendedKeyUsageOID.SERVER_AUTH, SERVER_LIFETIME)

    def machine_certificate(
        self, csr_pem: bytes, machine_id: str, lifetime: datetime.timedelta = MACHINE_CERT_LIFETIME
    ) -> x509.Certificate:
        """A client certificate for the CSR's key with CN = machine_id (whatever the CSR's own
        subject says: the relay decides who the key belongs to)."""
        csr = x509.load_pem_x509_csr(csr_pem)
        if not csr.is_signature_valid:
            raise ValueError("the CSR's signature does not match its key")
        builder = (
            x509.CertificateBuilder().subject_name(_name(machine_id)).public_key(csr.public_key())
        )
        return self._signed(builder, ExtendedKeyUsageOID.CLIENT_AUTH, lifetime)


def certificate_request(key: ec.EllipticCurvePrivateKey, machine_id: str) -> bytes:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(machine_id))
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def common_name(cert: x509.Certificate) -> str:
    values = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


def serial_hex(cert: x509.Certificate) -> str:
    return format(cert.serial_number, "x")
