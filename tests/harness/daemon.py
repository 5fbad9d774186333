"""A real BetCode daemon for tests: in-process (same event loop) or as a real subprocess.

Both run the pinned real Claude Code CLI (or a fake claude for fault injection) with the
isolated environment of a `Workspace`, and serve betcode.v1 on a Unix socket in tmp_path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import grpc
import psutil

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon, DaemonConfig
from betcode.daemon_socket import lock_path_for
from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2

Decision = common_pb2.PermissionDecision
T = TypeVar("T")


def daemon_config(
    root: Path, claude_bin: Path, environ: Mapping[str, str], **overrides: object
) -> DaemonConfig:
    config = DaemonConfig(
        data_dir=root / "data",
        socket_path=root / "sock" / "daemon.sock",
        claude_bin=str(claude_bin),
        environ=dict(environ),
        policy=SupervisorPolicy(idle_reap_seconds=None),
        # Never the developer's own ~/.config/betcode (permission rules, settings).
        config_dir=root / "config",
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


@dataclass
class DaemonProcess:
    """The daemon as a real subprocess (for kill -9 and restart tests).

    `stop` also kills whatever a `kill9` orphaned (claude children and their tools), so no
    test leaves processes behind."""

    root: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    orphans: list[psutil.Process] = field(default_factory=list)
    # More `daemon start` flags, e.g. ("--metrics", "127.0.0.1:0").
    args: tuple[str, ...] = ()
    # What runs the betcode CLI (harness/kill_point.py: a daemon killed at a chosen point).
    launcher: tuple[str, ...] = ("-m", "betcode.cli.main")
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.root / "daemon.log"

    @property
    def socket(self) -> Path:
        return Path(self.env["BETCODE_SOCKET"])

    def start(self, timeout: float = 30.0) -> None:
        """Start the daemon; return once it serves. Neither the socket file a killed daemon
        left behind nor another daemon's live socket counts: ours holds the lock (its pid is
        in the lock file) and accepts connections."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    *self.launcher,
                    "daemon",
                    "start",
                    "--foreground",
                    *self.args,
                ],
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log_path.read_text()[-2000:]}")
            if self._serving():
                return
            time.sleep(0.05)
        raise TimeoutError(f"daemon did not start: {self.log_path.read_text()[-2000:]}")

    def _serving(self) -> bool:
        assert self.process is not None
        try:
            holder = lock_path_for(self.socket).read_text().strip()
        except FileNotFoundError:
            return False
        return holder == str(self.process.pid) and accepts_connections(self.socket)

    def kill9(self, *, holders_too: bool = False) -> None:
        """SIGKILL the daemon as a crash would. The holders of its claude processes run in
        sessions of their own, so they (and claude) live on, as they would for real; they are
        remembered for `stop`. `holders_too`: SIGKILL the holders as well, so each claude dies
        with its holder (its guard kills claude's group) and no session can be re-attached."""
        assert self.process is not None
        with contextlib.suppress(psutil.Error):
            self.orphans += psutil.Process(self.process.pid).children(recursive=True)
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        if holders_too:
            for orphan in self.orphans:
                with contextlib.suppress(psutil.Error):
                    if any(part.endswith("holder.py") for part in orphan.cmdline()):
                        orphan.kill()

    def wait_killed(self, timeout: float) -> None:
        """Wait for a daemon that killed itself (harness/kill_point.py); the holders it left
        (their folders are under its root) are remembered for `stop`."""
        assert self.process is not None
        self.process.wait(timeout)
        assert self.process.returncode == -signal.SIGKILL, self.process.returncode
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if any(str(self.root) in part for part in process.cmdline()):
                    self.orphans.append(process)

    def _kill_orphans(self) -> None:
        for orphan in self.orphans:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if orphan.is_running() and (group := os.getpgid(orphan.pid)) != os.getpgid(0):
                    os.killpg(group, signal.SIGKILL)

    def child_command_lines(self) -> list[list[str]]:
        """The argv of the running daemon's live descendants (its claude processes and their
        tools); zombies and processes gone meanwhile are skipped."""
        assert self.process is not None
        found = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                found.append(child.cmdline())
        return found

    def stop(self) -> int:
        """SIGTERM the daemon if it runs, then kill the process groups of any orphans. A daemon
        still there 20 s after SIGTERM (its loop blocked) is killed, never left running after
        the test, and the stop fails saying so."""
        returncode = 0
        ignored_sigterm = False
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(20)
                except subprocess.TimeoutExpired:
                    ignored_sigterm = True
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
            returncode = self.process.returncode
        self._kill_orphans()
        if ignored_sigterm:
            raise AssertionError("the daemon did not stop within 20 s of SIGTERM; killed")
        return returncode


def accepts_connections(socket_path: Path) -> bool:
    """Whether something listens on the Unix socket (a stale socket file refuses)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(os.fspath(socket_path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False
    return True


def daemon_process_env(root: Path, claude_bin: Path, environ: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    env.update(
        {
            "BETCODE_CLAUDE_BIN": str(claude_bin),
            "BETCODE_SOCKET": str(root / "sock" / "daemon.sock"),
            "BETCODE_DATA_DIR": str(root / "data"),
            "BETCODE_CONFIG_DIR": str(root / "config"),
        }
    )
    return env


def daemon_process_in(
    tmp_path: Path, claude_bin: Path, environ: Mapping[str, str]
) -> DaemonProcess:
    """A daemon (not started yet) on tmp_path/daemon, running `claude_bin` in `environ`."""
    root = tmp_path / "daemon"
    root.mkdir()
    return DaemonProcess(root, daemon_process_env(root, claude_bin, environ))


class Client:
    """A raw betcode.v1 client on one stream (Converse, or ResumeSession to observe), recording
    every event it receives."""

    def __init__(self, socket: Path, client_id: str) -> None:
        self.channel = grpc.aio.insecure_channel(
            f"unix:{socket}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.client_id = client_id
        self.extra_metadata: tuple[tuple[str, str], ...] = ()  # e.g. a traceparent
        self.events: list[agent_pb2.AgentEvent] = []
        self._outbox: asyncio.Queue[agent_pb2.AgentRequest] = asyncio.Queue()
        self._call: grpc.aio.StreamStreamCall | grpc.aio.UnaryStreamCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-client-id", self.client_id), *self.extra_metadata)

    async def _requests(self) -> AsyncIterator[agent_pb2.AgentRequest]:
        while True:
            yield await self._outbox.get()

    def converse(self, start: agent_pb2.StartConversation) -> None:
        """Attach (or create); an attach replays the whole history unless `start` says from
        where (the daemon would send only live events without `from_sequence`)."""
        if start.session_id and not start.HasField("from_sequence"):
            start.from_sequence = 0
        self._outbox.put_nowait(agent_pb2.AgentRequest(start=start))
        self._call = self.stub.Converse(self._requests(), metadata=self._metadata)
        self._reader = asyncio.create_task(self._read())

    def resume(self, session_id: str, from_sequence: int = 0, *, follow: bool = True) -> None:
        """Observe a session: ResumeSession replays after `from_sequence`, then goes live
        (`follow`) or ends."""
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=from_sequence, follow=follow
        )
        self._call = self.stub.ResumeSession(request, metadata=self._metadata)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._call is not None
        try:
            async for event in self._call:
                self.events.append(event)
                self._changed.set()
        finally:
            self._changed.set()  # waiters notice the end of the stream

    async def ended(self, within_s: float = 30.0) -> None:
        """Wait until the stream ends (a ResumeSession without `follow` ends after replay)."""
        assert self._reader is not None
        await asyncio.wait_for(asyncio.shield(self._reader), within_s)

    def send(self, request: agent_pb2.AgentRequest) -> None:
        self._outbox.put_nowait(request)

    def say(self, text: str) -> None:
        self.send(agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=text)))

    def answer(self, request_id: str, decision: Decision.ValueType, message: str = "") -> None:
        self.send(
            agent_pb2.AgentRequest(
                permission=agent_pb2.PermissionResponse(
                    request_id=request_id, decision=decision, message=message
                )
            )
        )

    def of_kind(self, kind: str) -> list[agent_pb2.AgentEvent]:
        return [e for e in self.events if e.WhichOneof("event") == kind]

    @property
    def sequences(self) -> list[int]:
        """The sequence of every stored event received, in arrival order."""
        return [event.sequence for event in self.events if event.sequence]

    async def _until(self, reached: Callable[[], T | None], what: str, within_s: float) -> T:
        """Wait (at most `within_s`) until `reached()` gives a value; fail if the stream ends."""

        async def until() -> T:
            while True:
                found = reached()
                if found is not None:
                    return found
                if self._reader is not None and self._reader.done():
                    self._reader.result()
                    raise AssertionError(f"{self.client_id}: stream ended before {what}")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(until(), within_s)

    async def wait_for(
        self, kind: str, count: int = 1, within_s: float = 60.0
    ) -> agent_pb2.AgentEvent:
        def nth() -> agent_pb2.AgentEvent | None:
            found = self.of_kind(kind)
            return found[count - 1] if len(found) >= count else None

        return await self._until(nth, f"{count} {kind} events", within_s)

    async def wait_for_status(
        self, status: int, after: int = 0, within_s: float = 60.0
    ) -> agent_pb2.AgentEvent:
        """The first StatusChange to `status` with a sequence above `after`."""

        def changed() -> agent_pb2.AgentEvent | None:
            return next(
                (
                    event
                    for event in self.of_kind("status_change")
                    if event.status_change.status == status and event.sequence > after
                ),
                None,
            )

        return await self._until(changed, f"status {status}", within_s)

    async def wait_for_sequence(self, sequence: int, within_s: float = 30.0) -> None:
        def seen() -> bool | None:
            return any(event.sequence >= sequence for event in self.events) or None

        await self._until(seen, f"sequence {sequence}", within_s)

    @property
    def session_id(self) -> str:
        return self.of_kind("session_info")[0].session_info.session_id

    async def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await self.channel.close()


@dataclass
class InProcessDaemon:
    daemon: Daemon
    config: DaemonConfig

    @property
    def socket(self) -> Path:
        return self.config.socket_path


@contextlib.asynccontextmanager
async def running_daemon(config: DaemonConfig) -> AsyncIterator[InProcessDaemon]:
    """A daemon in this event loop with `config`, stopped on the way out."""
    running = Daemon(config)
    await running.start()
    try:
        yield InProcessDaemon(running, config)
    finally:
        await running.stop()
