"""The relay's own directory: CA, server certificate, JWT signing key and config, written by
`betcode relay init` (every file 0600) and read by `betcode relay start`."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode.config.dirs import config_dir
from betcode.remote.owner_only import write_private
from betcode.remote.pki import Authority, cert_pem, key_pem, new_key

CONFIG_NAME = "relay.json"
JWT_KEY_BYTES = 32


class RelayNotInitialized(Exception):
    pass


def default_relay_dir() -> Path:
    return config_dir() / "relay"


@dataclass(frozen=True)
class RelayFiles:
    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    @property
    def jwt_key(self) -> Path:
        return self.root / "jwt.key"

    @property
    def config(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def accounts_db(self) -> Path:
        return self.root / "accounts.db"

    @property
    def nats_dir(self) -> Path:
        return self.root / "nats"

    def authority(self) -> Authority:
        self.require()
        return Authority.load(self.ca_cert, self.ca_key)

    def jwt_secret(self) -> bytes:
        self.require()
        return bytes.fromhex(self.jwt_key.read_text().strip())

    def require(self) -> None:
        missing = [
            path.name
            for path in (self.ca_cert, self.ca_key, self.server_cert, self.server_key, self.jwt_key)
            if not path.exists()
        ]
        if missing:
            raise RelayNotInitialized(
                f"{self.root} has no {', '.join(missing)}; run `betcode relay init --host NAME`"
            )


def init_relay(files: RelayFiles, hosts: Sequence[str], *, force: bool = False) -> None:
    """Creates the CA, a server certificate for ``hosts``, the JWT key and the config. Refuses
    to replace an existing CA unless ``force`` (every machine certificate hangs off it)."""
    if not hosts:
        raise ValueError("at least one --host is needed (the names clients dial)")
    if files.ca_key.exists() and not force:
        raise FileExistsError(f"{files.ca_key} exists; pass --force to replace the relay's CA")
    files.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    authority = Authority.create()
    server_key = new_key()
    server_cert = authority.server_certificate(server_key, list(hosts))
    write_private(files.ca_key, key_pem(authority.key))
    write_private(files.ca_cert, cert_pem(authority.cert))
    write_private(files.server_key, key_pem(server_key))
    write_private(files.server_cert, cert_pem(server_cert))
    write_private(files.jwt_key, secrets.token_bytes(JWT_KEY_BYTES).hex().encode())
    write_private(files.config, json.dumps({"hosts": list(hosts)}, indent=2).encode())
