"""The world of the ConfigService tests (imported by name; this folder is on sys.path).

A real gRPC server on a real Unix socket serving ConfigService over a config dir in a temporary
folder, with the real rule book and a real session manager on a SQLite file (its sessions never
start claude here).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from server_harness import connect, make_daemon

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.rulebook import RuleBook
from betcode.server.app import DaemonServer, RpcService
from betcode.server.config_service import ConfigService, ServerFacts
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.manager import SessionManager
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.v1 import config_pb2, config_pb2_grpc


@dataclass
class ConfigWorld:
    root: Path
    stub: config_pb2_grpc.ConfigServiceStub
    rules: RuleBook
    sessions: SessionManager
    socket_path: Path
    changes: list[str] = field(default_factory=list)  # one entry per on_change call

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def workdir(self) -> Path:
        return self.root / "project"

    def write_settings(self, data: Mapping[str, object]) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.settings_file.write_text(json.dumps(data, indent=2))

    def read_settings(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.settings_file.read_text())
        return data


StartWorld = Callable[..., Awaitable[ConfigWorld]]


@pytest.fixture
async def start_world(short_dir: Path) -> AsyncIterator[StartWorld]:
    """`await start_world(environ={...}, overrides={...})`: a served ConfigService whose
    daemon has that environment and those `--set` flags."""
    stops: list[Callable[[], Awaitable[None]]] = []

    async def start(
        environ: Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
    ) -> ConfigWorld:
        root = short_dir
        (root / "project").mkdir(exist_ok=True)
        database = open_database(root / "daemon.db")
        writer, reader = StoreWriter(database), StoreReader(database)
        rules = RuleBook(root / "config", home=root)
        bridge = PermissionBridge(writer, reader, rules=rules)
        context = SessionContext(
            writer=writer,
            reader=reader,
            claude_binary=ClaudeBinary(Path("/bin/false"), BinarySource.FLAG),
            child_env=lambda: {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            process_policy=SupervisorPolicy(idle_reap_seconds=None),
            permissions=bridge,
            settings=SessionSettings(),
        )
        sessions = SessionManager(context)
        socket_path = root / "run" / "daemon.sock"
        changes: list[str] = []

        def on_change() -> None:
            changes.append("reload")
            rules.reload()

        service = ConfigService(
            config_dir=root / "config",
            environ=dict(environ or {}),
            rules=rules,
            sessions=sessions,
            facts=ServerFacts(socket_path, root / "daemon.db", lambda: None),
            on_change=on_change,
            settings_overrides=overrides,
        )
        descriptor = config_pb2.DESCRIPTOR.services_by_name["ConfigService"]
        server: DaemonServer = make_daemon(services=[RpcService(descriptor, service)])
        await server.start(socket_path)
        channel: grpc.aio.Channel = connect(f"unix:{socket_path}")

        async def stop() -> None:
            await channel.close()
            await server.stop(grace_s=0)
            await sessions.shutdown()
            await writer.close()
            reader.close()

        stops.append(stop)
        return ConfigWorld(
            root, config_pb2_grpc.ConfigServiceStub(channel), rules, sessions, socket_path, changes
        )

    yield start
    for stop in stops:
        await stop()


async def rpc_error(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    """The error a call ends with (it must fail)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value
