"""SQLite follows the input lock of a real daemon: every time the lock moves —
first attach, holder leaving, RequestInputLock — sessions.input_lock_client and the clients'
connected_clients.has_input_lock say who holds it, with at most one client flagged."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from harness.daemon import Client, daemon_config

from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

Lock = tuple[str | None, list[str]]  # (sessions.input_lock_client, clients flagged)


def stored_lock(database: Path, session_id: str) -> Lock:
    with sqlite3.connect(database) as db:
        (holder,) = db.execute(
            "SELECT input_lock_client FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        flagged = db.execute(
            "SELECT client_id FROM connected_clients WHERE has_input_lock = 1 ORDER BY client_id"
        ).fetchall()
    return holder, [client_id for (client_id,) in flagged]


async def eventually(read: Callable[[], Lock], wanted: Lock) -> None:
    """The rows are written in the background, in order; poll until they show `wanted`."""
    for _ in range(400):
        if read() == wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"stored lock {read()!r}, expected {wanted!r}")


async def test_the_stored_input_lock_follows_the_holder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(tmp_path / "fake", {"turns": [[{"do": "text", "text": "ok"}]]})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    quick_transfer = SessionSettings(lock_transfer_seconds=0.2)
    config = daemon_config(tmp_path / "d", fake, environ, sessions=quick_transfer)
    daemon = Daemon(config)
    await daemon.start()
    clients: list[Client] = []

    def attach(client_id: str, start: agent_pb2.StartConversation) -> Client:
        client = Client(config.socket_path, client_id)
        clients.append(client)
        client.converse(start)
        return client

    try:
        first = attach("first", agent_pb2.StartConversation(working_directory=str(repo)))
        await first.wait_for("session_info")
        session_id = first.session_id

        def read() -> Lock:
            return stored_lock(config.data_dir / "daemon.db", session_id)

        await eventually(read, ("first", ["first"]))

        joined = agent_pb2.StartConversation(session_id=session_id)
        # One after the other: two streams opened together may attach in either order.
        second = attach("second", joined)
        await second.wait_for("input_lock")
        third = attach("third", joined)
        await third.wait_for("input_lock")
        await eventually(read, ("first", ["first"]))

        await first.close()  # the holder leaves: the longest attached client takes over
        await eventually(read, ("second", ["second"]))

        asked = await third.stub.RequestInputLock(
            agent_pb2.InputLockRequest(session_id=session_id), metadata=(("x-client-id", "third"),)
        )
        assert asked.granted  # "second" stayed silent
        await eventually(read, ("third", ["third"]))

        await third.close()
        await eventually(read, ("second", ["second"]))
        await second.close()
        await eventually(read, (None, []))
    finally:
        for client in clients:
            await client.close()
        await daemon.stop()
