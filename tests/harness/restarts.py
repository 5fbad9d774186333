"""A real daemon restarted at will (kill -9, `stop --keep-sessions`) over the same data dir,
with its clients and the holders it leaves behind (claude/holder), for live-restore tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from betcode.daemon import KEEP_SESSIONS_SIGNAL
from betcode.v1 import agent_pb2
from harness.daemon import Client, DaemonProcess, daemon_process_env


class Restarts:
    """One daemon (restarted at will) on tmp_path/daemon and its clients; at teardown the
    clients close, the daemon stops and whatever it left running is killed."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.root = tmp_path / "daemon"
        self.root.mkdir()
        self.clients: list[Client] = []
        self.daemon: DaemonProcess | None = None

    async def start(self, claude_bin: Path, environ: dict[str, str], *args: str) -> DaemonProcess:
        """Start the daemon (`args`: more `daemon start` flags, kept for its restarts)."""
        env = daemon_process_env(self.root, claude_bin, environ)
        self.daemon = DaemonProcess(self.root, env, args=args)
        await asyncio.to_thread(self.daemon.start)
        return self.daemon

    async def start_fake_session(
        self, fake_claude: Path, *args: str
    ) -> tuple[DaemonProcess, Client]:
        """The daemon on a fake claude (HOME in tmp_path; `args` as for `start`), and a client
        "writer" in a new session on tmp_path/repo."""
        repo = self.tmp_path / "repo"
        repo.mkdir()
        environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp_path)}
        daemon = await self.start(fake_claude, environ, *args)
        writer = self.client("writer")
        writer.converse(agent_pb2.StartConversation(working_directory=str(repo)))
        await writer.wait_for("session_info")
        return daemon, writer

    def client(self, client_id: str) -> Client:
        client = Client(self.root / "sock" / "daemon.sock", client_id)
        self.clients.append(client)
        return client

    async def restart(self, kind: str) -> None:
        """Restart the daemon as `daemon restart` does ("graceful": SIGUSR2, the holders left
        running) or as a crash and a new `daemon start` would ("kill9")."""
        daemon = self.daemon
        assert daemon is not None
        assert daemon.process is not None
        if kind == "kill9":
            await asyncio.to_thread(daemon.kill9)
        else:
            assert kind == "graceful", kind
            daemon.process.send_signal(KEEP_SESSIONS_SIGNAL)
            assert await asyncio.to_thread(daemon.process.wait, 30) == 0
        await asyncio.to_thread(daemon.start)

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`betcode ARGS` run against the current daemon, as a user would."""
        assert self.daemon is not None
        return await asyncio.to_thread(
            subprocess.run,
            betcode_argv(*args),
            env=self.daemon.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    @property
    def database(self) -> Path:
        return self.root / "data" / "daemon.db"

    def holders(self) -> list[dict[str, Any]]:
        """holder.json of every holder alive or not yet collected, plus its folder."""
        found = []
        for facts in sorted((self.root / "data" / "holders").glob("*/holder.json")):
            found.append({**json.loads(facts.read_text()), "dir": facts.parent})
        return found

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        if self.daemon is not None:
            await asyncio.to_thread(self.daemon.stop)
        for holder in self.holders():  # left by a test that failed half-way
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(holder["claude_pid"], signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(holder["holder_pid"], signal.SIGKILL)


def betcode_argv(*args: str) -> list[str]:
    """The `betcode ARGS` command line, run from this checkout."""
    return [sys.executable, "-m", "betcode.cli.main", *args]


def spooled_end(holder_dir: Path) -> int:
    """How many bytes of claude's stdout the holder has taken in (its spool's end)."""
    segments = sorted((holder_dir / "spool").iterdir())
    if not segments:
        return 0
    return int(segments[-1].name) + segments[-1].stat().st_size


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts: an orphan's parent here may never reap)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
