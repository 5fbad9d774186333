"""A real BetCode daemon for tests: in-process (same event loop) or as a real subprocess.

Both run the pinned real Claude Code CLI (or a fake claude for fault injection) with the
isolated environment of a `Workspace`, and serve betcode.v1 on a Unix socket in tmp_path.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon, DaemonConfig
from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2

Decision = common_pb2.PermissionDecision


def daemon_config(
    root: Path, claude_bin: Path, environ: Mapping[str, str], **overrides: object
) -> DaemonConfig:
    config = DaemonConfig(
        data_dir=root / "data",
        socket_path=root / "sock" / "daemon.sock",
        claude_bin=str(claude_bin),
        environ=dict(environ),
        policy=SupervisorPolicy(idle_reap_seconds=None),
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


@dataclass
class DaemonProcess:
    """The daemon as a real subprocess (for kill -9 and restart tests)."""

    root: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.root / "daemon.log"

    @property
    def socket(self) -> Path:
        return Path(self.env["BETCODE_SOCKET"])

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log_path.read_text()[-2000:]}")
            if self.socket.exists():
                return
            time.sleep(0.05)
        raise TimeoutError(f"daemon did not start: {self.log_path.read_text()[-2000:]}")

    def kill9(self) -> None:
        """SIGKILL the daemon's whole process group: the daemon and its claude children."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(20)


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


class Client:
    """A raw betcode.v1 client on one Converse stream, recording every event it receives."""

    def __init__(self, socket: Path, client_id: str) -> None:
        self.channel = grpc.aio.insecure_channel(
            f"unix:{socket}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.client_id = client_id
        self.events: list[agent_pb2.AgentEvent] = []
        self._outbox: asyncio.Queue[agent_pb2.AgentRequest] = asyncio.Queue()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def _requests(self) -> AsyncIterator[agent_pb2.AgentRequest]:
        while True:
            yield await self._outbox.get()

    def converse(self, start: agent_pb2.StartConversation) -> None:
        self._outbox.put_nowait(agent_pb2.AgentRequest(start=start))
        self._call = self.stub.Converse(
            self._requests(), metadata=(("x-client-id", self.client_id),)
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._call is not None
        async for event in self._call:
            self.events.append(event)
            self._changed.set()

    def send(self, request: agent_pb2.AgentRequest) -> None:
        self._outbox.put_nowait(request)

    def say(self, text: str) -> None:
        self.send(agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=text)))

    def answer(self, request_id: str, decision: int, message: str = "") -> None:
        self.send(
            agent_pb2.AgentRequest(
                permission=agent_pb2.PermissionResponse(
                    request_id=request_id, decision=decision, message=message
                )
            )
        )

    def of_kind(self, kind: str) -> list[agent_pb2.AgentEvent]:
        return [e for e in self.events if e.WhichOneof("event") == kind]

    async def wait_for(
        self, kind: str, count: int = 1, within_s: float = 60.0
    ) -> agent_pb2.AgentEvent:
        async def until() -> agent_pb2.AgentEvent:
            while True:
                found = self.of_kind(kind)
                if len(found) >= count:
                    return found[count - 1]
                if self._reader is not None and self._reader.done():
                    self._reader.result()
                    raise AssertionError(f"stream ended before {count} {kind} events")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(until(), within_s)

    async def wait_for_sequence(self, sequence: int, within_s: float = 30.0) -> None:
        async def until() -> None:
            while not any(event.sequence >= sequence for event in self.events):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(until(), within_s)

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
