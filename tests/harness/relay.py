"""A real relay for tests: `betcode relay init` + `betcode relay start` in its own process (its
own embedded nats-server, SQLite accounts), and `betcode` commands run as a user runs them,
each with its own config dir (a client's, a daemon machine's)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import grpc
import grpc.aio

from betcode.cli.relay_e2e import EncryptingChannel
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.relay.buffer import BufferSettings
from betcode.relay.layout import RelayFiles, init_relay
from betcode.relay.server import Relay, RelayOptions
from betcode.remote import frames
from betcode.remote.e2e import ClientSession, DaemonIdentity
from betcode.remote.pki import certificate_request, key_pem, new_key
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    auth_pb2,
    auth_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
)
from harness.daemon import daemon_config
from harness.environment import Workspace, make_workspace
from harness.paths import require_pinned_claude

MACHINE = "box"
LISTENING = re.compile(r"relay (\S+) listening on (\S+) \(daemons: (\S+)\)")


def betcode_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "betcode.cli.main", *args]


@dataclass
class RelayProcess:
    root: Path  # the relay's files (ca.pem, keys, accounts, nats) live here
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    process: subprocess.Popen[bytes] | None = None
    url: str = ""  # clients
    tunnel_url: str = ""  # daemons
    relay_id: str = ""

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def log_path(self) -> Path:
        return self.root.parent / f"{self.root.name}.log"

    def init(self) -> None:
        subprocess.run(
            betcode_argv("relay", "init", "--dir", str(self.root), "--host", "127.0.0.1"),
            check=True,
            capture_output=True,
            env=dict(self.env),
        )

    def start(self, timeout: float = 30.0) -> None:
        if not self.ca.exists():
            self.init()
        listen = [
            "--listen",
            self.url.split("://")[-1] if self.url else "127.0.0.1:0",
            "--tunnel-listen",
            self.tunnel_url.split("://")[-1] if self.tunnel_url else "127.0.0.1:0",
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                betcode_argv("relay", "start", "--dir", str(self.root), *listen, *self.extra_args),
                env=dict(self.env),
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline().decode()
            if match := LISTENING.search(line):
                self.relay_id = match.group(1)
                self.url = f"https://{match.group(2)}"
                self.tunnel_url = f"https://{match.group(3)}"
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"relay did not start: {self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)

    def kill9(self) -> None:
        """Crash the relay (SIGKILL to its process group). Its nats-server, in a session of its
        own, is not in that group: it lives on, as after a real crash, until the next relay
        started on the directory ends it."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@dataclass
class Carried:
    """What the relay's NATS carries: every subject, and the body and header values of every
    message, for tests to look for plaintext in."""

    nc: Any
    subjects: list[str]
    payloads: list[bytes]  # bodies and header values of every NATS message
    subscription: Any = None

    async def spy(self, msg: Any) -> None:
        self.subjects.append(msg.subject)
        self.payloads.append(msg.data)
        self.payloads += [str(value).encode() for value in (msg.headers or {}).values()]

    async def watch(self, subjects: str) -> None:
        if self.subscription is not None:
            await self.subscription.unsubscribe()
        self.subscription = await self.nc.subscribe(subjects, cb=self.spy)


@dataclass
class Finished:
    code: int
    out: str
    err: str


@dataclass(frozen=True)
class BetcodeUser:
    """`betcode --relay URL --relay-custom-ca-cert CA ...` with one config dir."""

    relay: RelayProcess
    config_dir: Path
    cwd: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def _env(self) -> dict[str, str]:
        env = dict(self.env)
        env.update({"BETCODE_CONFIG_DIR": str(self.config_dir), "BETCODE_PASSWORD": "pw-123456"})
        env.pop("BETCODE_SOCKET", None)
        return env

    async def spawn(
        self, *args: str, relay_url: str | None = None, wrapper: Sequence[str] = ()
    ) -> asyncio.subprocess.Process:
        """``wrapper``: a command that runs the rest (e.g. in another mount namespace)."""
        argv = betcode_argv(
            "--relay",
            relay_url or self.relay.url,
            "--relay-custom-ca-cert",
            str(self.relay.ca),
            *args,
        )
        return await asyncio.create_subprocess_exec(
            *wrapper,
            *argv,
            cwd=self.cwd,
            env=self._env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def run(
        self, *args: str, relay_url: str | None = None, wrapper: Sequence[str] = ()
    ) -> Finished:
        return await finish(await self.spawn(*args, relay_url=relay_url, wrapper=wrapper))


async def finish(process: asyncio.subprocess.Process) -> Finished:
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


async def stderr_until(process: asyncio.subprocess.Process, pattern: re.Pattern[str]) -> str:
    assert process.stderr is not None

    async def read() -> str:
        seen = []
        while line := (await process.stderr.readline()).decode():  # type: ignore[union-attr]
            seen.append(line)
            if match := pattern.search(line):
                return match.group(1)
        raise AssertionError(f"stderr ended without {pattern.pattern}: {''.join(seen)}")

    return await asyncio.wait_for(read(), 90)


@contextlib.asynccontextmanager
async def relay_in_process(root: Path, **options: object) -> AsyncIterator[Relay]:
    """A relay in this event loop (its own nats-server child), for tests that call its services
    directly; stopped (and its nats-server with it) on exit."""
    files = RelayFiles(root)
    if not files.ca_cert.exists():
        init_relay(files, ["127.0.0.1"])
    relay = Relay(
        RelayOptions(
            files,
            listen="127.0.0.1:0",
            tunnel_listen="127.0.0.1:0",
            **options,  # type: ignore[arg-type]
        )
    )
    try:
        await relay.start()
        yield relay
    finally:
        await relay.stop()


def client_channel(relay: Relay) -> grpc.aio.Channel:
    """A client's channel to the relay, taking messages as large as the relay carries (as the
    CLI's and the web gateway's do)."""
    root = relay.options.files.ca_cert.read_bytes()
    return grpc.aio.secure_channel(
        f"127.0.0.1:{relay.port}",
        grpc.ssl_channel_credentials(root_certificates=root),
        options=[("grpc.max_receive_message_length", frames.MAX_MESSAGE_BYTES)],
    )


def tunnel_channel(
    relay: Relay, key_pem: bytes | None = None, cert_pem: bytes | None = None
) -> grpc.aio.Channel:
    root = relay.options.files.ca_cert.read_bytes()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key_pem, certificate_chain=cert_pem
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{relay.tunnel_port}", credentials)


@dataclass
class Account:
    user_id: str
    access: str
    refresh: str


@dataclass
class Registered:
    key: bytes
    cert: bytes


async def register(channel: grpc.aio.Channel, name: str) -> Account:
    stub = auth_pb2_grpc.AuthServiceStub(channel)
    reply = await stub.Register(auth_pb2.RegisterRequest(username=name, password="pw-123456"))
    return Account(reply.user_id, reply.access_token, reply.refresh_token)


async def login(channel: grpc.aio.Channel, name: str) -> Account:
    stub = auth_pb2_grpc.AuthServiceStub(channel)
    reply = await stub.Login(auth_pb2.LoginRequest(username=name, password="pw-123456"))
    return Account(reply.user_id, reply.access_token, reply.refresh_token)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def register_machine(
    channel: grpc.aio.Channel,
    account: Account,
    machine_id: str,
    identity: MachineIdentity | None = None,
) -> Registered:
    """Registers a machine; with ``identity``, as `machine register` does on the machine (its
    key, certificate and the relay CA stored there for its daemon)."""
    key = new_key()
    csr = certificate_request(key, machine_id) if identity is None else None
    request = machine_pb2.RegisterMachineRequest(
        machine_id=machine_id,
        name=machine_id,
        metadata={"csr_pem": (csr or identity.new_request(machine_id)).decode()},  # type: ignore[union-attr]
    )
    reply = await machine_pb2_grpc.MachineServiceStub(channel).RegisterMachine(
        request, metadata=bearer(account.access)
    )
    cert = reply.machine.metadata["certificate_pem"]
    if identity is not None:
        identity.store(machine_id, machine_id, cert, reply.machine.metadata["ca_pem"])
        return Registered(identity.key_file.read_bytes(), cert.encode())
    return Registered(key_pem(key), cert.encode())


@dataclass
class Rig:
    relay: Relay
    channel: grpc.aio.Channel
    account: Account
    config: DaemonConfig
    daemon: Daemon | None = None
    sessions: dict[bytes, ClientSession] = field(default_factory=dict)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (*bearer(self.account.access), ("x-machine-id", MACHINE), ("x-client-id", "phone"))

    @property
    def sealed(self) -> EncryptingChannel:
        """The relay's channel with every call end-to-end encrypted, sealed to the daemon's
        identity key (works whether the machine is online or offline, as the CLI's offline
        sessions do)."""
        identity = DaemonIdentity.load_or_create(
            MachineIdentity(self.config.config_dir / "certs").e2e_key_file
        )
        if identity.public not in self.sessions:  # a new key (a test replaced it): a new one
            self.sessions[identity.public] = ClientSession.sealed(identity.public)
        return EncryptingChannel(self.channel, self.sessions[identity.public])

    @property
    def agent(self) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self.sealed)

    async def start_daemon(self) -> None:
        self.daemon = Daemon(self.config)
        await self.daemon.start()
        await until_reachable(self)

    async def stop_daemon(self, *, keep_sessions: bool = False) -> None:
        """Stops the daemon; with ``keep_sessions`` as `daemon restart` does (every claude
        goes on under its holder, for the next daemon)."""
        assert self.daemon is not None
        if keep_sessions:
            self.daemon.request_stop_keeping_sessions()
        await self.daemon.stop()
        self.daemon = None


async def until_reachable(rig: Rig, within_s: float = 30.0) -> None:
    async with asyncio.timeout(within_s):
        while True:
            try:
                await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
                return
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)


async def until(condition: Callable[[], object], within_s: float = 30.0) -> None:
    async with asyncio.timeout(within_s):
        while not await condition():  # type: ignore[misc]  # noqa: ASYNC110 - JetStream state
            await asyncio.sleep(0.1)


def rig_fixture(
    settings: BufferSettings, **relay_options: object
) -> Callable[..., AsyncIterator[Rig]]:
    async def make(
        tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
    ) -> AsyncIterator[Rig]:
        async with (
            relay_in_process(tmp_path / "relay", buffer=settings, **relay_options) as relay,
            client_channel(relay) as channel,
        ):
            account = await register(channel, "alice")
            identity = MachineIdentity(tmp_path / "daemon" / "config" / "certs")
            machine = await register_machine(channel, account, MACHINE, identity)
            assert machine.cert
            config = replace(
                daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url)),
                relay_urls=(f"https://127.0.0.1:{relay.tunnel_port}",),
            )
            rig = Rig(relay, channel, account, config)
            try:
                yield rig
            finally:
                if rig.daemon is not None:
                    await rig.daemon.stop()

    return make


@contextlib.asynccontextmanager
async def relay_rig(root: Path) -> AsyncIterator[tuple[Rig, Workspace]]:
    """rig_fixture's rig outside pytest (benchmarks): a relay, a machine registered, the mock
    model; the daemon not started."""
    workspace = make_workspace(root / "claude")
    with MockAnthropic() as mock_api:
        make = rig_fixture(BufferSettings())
        rigs = cast(AsyncGenerator[Rig], make(root, require_pinned_claude(), mock_api, workspace))
        rig = await anext(rigs)
        try:
            yield rig, workspace
        finally:
            await rigs.aclose()


BASH_PROMPT = "SCN:tool_bash run it"


async def waiting_permission(
    rig: Rig, start: agent_pb2.StartConversation, prompt: str = BASH_PROMPT
) -> tuple[str, str]:
    """Starts a turn whose tool call waits for approval; its session and request ids."""
    requests = [
        agent_pb2.AgentRequest(start=start),
        agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=prompt)),
    ]
    call = rig.agent.Converse(iter(requests), metadata=rig.metadata)
    async for event in call:
        if event.WhichOneof("event") == "permission_request":
            call.cancel()
            listed = await rig.agent.ListPendingPermissions(
                agent_pb2.ListPendingPermissionsRequest(), metadata=rig.metadata
            )
            [row] = listed.pending
            return row.session_id, event.permission_request.request_id
    raise AssertionError("the turn ended without asking")


async def stored_text(rig: Rig, session_id: str) -> str:
    request = agent_pb2.ResumeSessionRequest(session_id=session_id)
    events = [str(e) async for e in rig.agent.ResumeSession(request, metadata=rig.metadata)]
    return "\n".join(events)
