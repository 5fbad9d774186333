"""The world of the bridge tests (imported by name; this folder is on sys.path).

A `World` is the daemon's permission path built for real: StoreWriter/StoreReader on a
database file, a PermissionBridge with rules from files, a SessionManager whose sessions run
`betcode.devtools.fake_claude` playing a script, and a clock the test moves.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.config.settings import PermissionSettings
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.notifier import Notifier
from betcode.permissions.rulebook import RuleBook
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.manager import SessionManager
from betcode.sessions.session import Session
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.pending import PendingPermission, get_pending
from betcode.v1 import agent_pb2

FAST = SupervisorPolicy(
    backoff_initial=0.02,
    backoff_max=0.1,
    watchdog_seconds=60.0,
    kill_grace_seconds=0.5,
    idle_reap_seconds=None,
)
WAIT_SECONDS = 20.0


class FakeClock:
    """The bridge's clock: real time plus however far the test moved it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def permission(tool: str, tool_input: dict[str, Any], request_id: str) -> dict[str, Any]:
    """A fake-claude step: the tool_use, a can_use_tool with this id, wait for the answer."""
    return {"do": "permission", "tool_name": tool, "input": tool_input, "request_id": request_id}


@dataclass
class World:
    """One daemon's permission path over a database in `root`; `restart()` replaces the daemon
    (new store connections, bridge and sessions; same database and files)."""

    root: Path
    fake_claude: Path
    settings: PermissionSettings | None
    notify: list[str] | None
    clock: FakeClock = field(default_factory=FakeClock)
    sessions: list[Session] = field(default_factory=list)
    # Made by start():
    writer: StoreWriter = field(init=False)
    reader: StoreReader = field(init=False)
    bridge: PermissionBridge = field(init=False)
    manager: SessionManager = field(init=False)

    @property
    def db_path(self) -> Path:
        return self.root / "daemon.db"

    @property
    def workdir(self) -> Path:
        return self.root / "project"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    def start(self) -> None:
        database = open_database(self.db_path)
        self.writer, self.reader = StoreWriter(database), StoreReader(database)
        self.bridge = PermissionBridge(
            self.writer,
            self.reader,
            rules=RuleBook(self.config_dir, home=self.root),
            settings=self.settings,
            notifier=Notifier(self.notify, timeout=10.0),
            clock=self.clock,
        )
        context = SessionContext(
            writer=self.writer,
            reader=self.reader,
            claude_binary=ClaudeBinary(self.fake_claude, BinarySource.FLAG),
            child_env=lambda: {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            process_policy=FAST,
            permissions=self.bridge,
            settings=SessionSettings(),
        )
        self.manager = SessionManager(context)

    async def stop(self) -> None:
        await self.manager.shutdown()
        await self.bridge.close()
        await self.writer.close()
        self.reader.close()

    async def restart(self) -> None:
        await self.stop()
        self.start()

    async def new_session(self) -> Session:
        session = await self.manager.create(working_directory=str(self.workdir))
        self.sessions.append(session)
        return session

    def sql(self, query: str, *args: object) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db_path)
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def row(self, request_id: str) -> PendingPermission | None:
        conn = sqlite3.connect(self.db_path)
        try:
            return get_pending(conn, request_id)
        finally:
            conn.close()

    def stored(self, request_id: str) -> PendingPermission:
        row = self.row(request_id)
        assert row is not None, f"{request_id} is not stored"
        return row

    def lines(self, session_id: str, direction: str, kind: str) -> list[dict[str, Any]]:
        """Stored NDJSON lines of the session (what claude wrote, or what we wrote to it)."""
        rows = self.sql(
            "SELECT CAST(payload AS TEXT) FROM messages WHERE session_id = ? AND direction = ? "
            "AND message_type = ? ORDER BY sequence",
            session_id,
            direction,
            kind,
        )
        return [json.loads(payload) for (payload,) in rows]

    def answers_to(self, session_id: str, request_id: str) -> list[dict[str, Any]]:
        """The control_response bodies written to claude for `request_id`."""
        return [
            line["response"]
            for line in self.lines(session_id, "in", "control_response")
            if line["response"].get("request_id") == request_id
        ]

    def tool_results(self, session_id: str) -> list[str]:
        """The fake claude's tool_result texts: "<tool> ran", or the deny message."""
        texts = []
        for line in self.lines(session_id, "out", "user"):
            for block in line["message"]["content"]:
                if block.get("type") == "tool_result":
                    texts.append(block["content"])
        return texts

    def user_texts(self, session_id: str) -> list[str]:
        """The user messages written to claude."""
        return [line["message"]["content"] for line in self.lines(session_id, "in", "user")]

    def events(self, session_id: str, kind: str) -> list[agent_pb2.AgentEvent]:
        rows = self.sql(
            "SELECT payload FROM events WHERE session_id = ? AND kind = ? ORDER BY sequence",
            session_id,
            kind,
        )
        return [agent_pb2.AgentEvent.FromString(payload) for (payload,) in rows]

    def starts(self) -> list[dict[str, Any]]:
        """Every start of the fake claude so far (argv, pid)."""
        log = self.root / "starts.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    async def until(self, what: str, check: Callable[[], object]) -> Any:
        """Wait (polling) until `check()` is truthy; fail naming `what` after WAIT_SECONDS."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.01)
        pytest.fail(f"timed out waiting for {what}")


WorldFactory = Callable[..., Awaitable[World]]
