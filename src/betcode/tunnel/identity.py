"""The machine's relay identity in ``<config dir>/certs/`` (SEC-03; every file 0600): its
private key (made here, never sent), the certificate the relay issued for it, the relay's CA
and which machine id it is."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from betcode.remote.owner_only import write_private
from betcode.remote.pki import certificate_request, key_pem, new_key


class NoMachineIdentity(Exception):
    pass


@dataclass(frozen=True)
class RelayAddress:
    url: str  # the relay's client address (`betcode --relay URL`)
    ca_file: str  # the CA its certificate is checked by ("" = the system's)


@dataclass(frozen=True)
class MachineIdentity:
    root: Path  # <config dir>/certs

    @property
    def key_file(self) -> Path:
        return self.root / "machine.key"

    @property
    def cert_file(self) -> Path:
        return self.root / "machine.pem"

    @property
    def ca_file(self) -> Path:
        return self.root / "relay-ca.pem"

    @property
    def e2e_key_file(self) -> Path:
        """The X25519 identity key for end-to-end encryption (remote/e2e.py)."""
        return self.root / "e2e.key"

    @property
    def e2e_replay_file(self) -> Path:
        """The sealed (offline) end-to-end calls already run, so none runs twice."""
        return self.root / "e2e-replay.json"

    @property
    def info_file(self) -> Path:
        return self.root / "machine.json"

    def new_request(self, machine_id: str) -> bytes:
        """A fresh key (written now, 0600) and its CSR for the relay to sign."""
        key = new_key()
        write_private(self.key_file, key_pem(key))
        return certificate_request(key, machine_id)

    def store(
        self,
        machine_id: str,
        name: str,
        cert_pem: str,
        ca_pem: str,
        relay: RelayAddress | None = None,
    ) -> None:
        """``relay``: where the machine was registered, for `web pair` to reach it again."""
        write_private(self.cert_file, cert_pem.encode())
        write_private(self.ca_file, ca_pem.encode())
        info = {"machine_id": machine_id, "name": name}
        if relay is not None:
            info |= {"relay_url": relay.url, "relay_ca_file": relay.ca_file}
        write_private(self.info_file, json.dumps(info, indent=2).encode())

    def relay(self) -> RelayAddress | None:
        """The relay's client address the machine was registered at (None: registered before
        it was remembered)."""
        self.require()
        info = json.loads(self.info_file.read_text())
        url = info.get("relay_url")
        return RelayAddress(str(url), str(info.get("relay_ca_file") or "")) if url else None

    def exists(self) -> bool:
        return all(p.exists() for p in (self.key_file, self.cert_file, self.info_file))

    def require(self) -> None:
        if not self.exists():
            raise NoMachineIdentity(
                f"no machine identity in {self.root}: run "
                "`betcode --relay URL machine register --id ID --name NAME` first"
            )

    def machine_id(self) -> str:
        self.require()
        return str(json.loads(self.info_file.read_text())["machine_id"])

    def machine_name(self) -> str:
        self.require()
        return str(json.loads(self.info_file.read_text()).get("name", ""))

    def expires_within(self, margin: datetime.timedelta) -> bool:
        now = datetime.datetime.now(datetime.UTC)
        return self.certificate().not_valid_after_utc - now <= margin

    def renewal_request(self) -> tuple[ec.EllipticCurvePrivateKey, bytes]:
        """A new key (kept in memory until its certificate arrives) and its CSR."""
        key = new_key()
        return key, certificate_request(key, self.machine_id())

    def store_renewed(self, key: ec.EllipticCurvePrivateKey, cert_pem: str) -> None:
        write_private(self.key_file, key_pem(key))
        write_private(self.cert_file, cert_pem.encode())

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_file.read_bytes())

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return key
