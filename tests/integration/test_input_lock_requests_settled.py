"""A RequestInputLock whose wait nothing answered is still settled in the session's log: at
once when the requester disconnects (KEPT: the holder keeps the lock), and, when the daemon
was killed during the wait, by the restart's InputLockChange (nobody holds the lock), which a
replay shows after the PENDING."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from harness.daemon import Client, DaemonProcess, daemon_config, daemon_process_env
from harness.lock_story import lock_story

from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT
# The longest transfer time the settings allow: no wait here ends by its deadline.
TRANSFER_SECONDS = 60


def ask_for_the_lock(asker: Client, session_id: str) -> asyncio.Future[agent_pb2.InputLockResponse]:
    answer: asyncio.Future[agent_pb2.InputLockResponse] = asyncio.ensure_future(
        asker.stub.RequestInputLock(
            agent_pb2.InputLockRequest(session_id=session_id),
            metadata=(("x-client-id", asker.client_id),),
        )
    )
    return answer


async def holder_and_asker(socket: Path, repo: Path) -> tuple[Client, Client, str]:
    holder, asker = Client(socket, "holder"), Client(socket, "asker")
    holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    await holder.wait_for("session_info")
    asker.converse(agent_pb2.StartConversation(session_id=holder.session_id))
    await asker.wait_for("input_lock")
    return holder, asker, holder.session_id


@pytest.fixture
def fake_claude(tmp_path: Path) -> Path:
    return make_fake_claude(tmp_path / "fake", {"turns": [[{"do": "text", "text": "ok"}]]})


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
async def daemon_process(
    tmp_path: Path, fake_claude: Path, environ: dict[str, str]
) -> AsyncIterator[DaemonProcess]:
    root = tmp_path / "daemon"
    (root / "config").mkdir(parents=True)
    settings = {"daemon": {"input_lock": {"transfer_seconds": TRANSFER_SECONDS}}}
    (root / "config" / "settings.json").write_text(json.dumps(settings))
    daemon = DaemonProcess(root, daemon_process_env(root, fake_claude, environ))
    try:
        yield daemon
    finally:
        await asyncio.to_thread(daemon.stop)


async def test_a_requester_that_disconnects_leaves_its_request_kept(
    tmp_path: Path, fake_claude: Path, environ: dict[str, str], repo: Path
) -> None:
    sessions = SessionSettings(lock_transfer_seconds=TRANSFER_SECONDS)
    config = daemon_config(tmp_path / "d", fake_claude, environ, sessions=sessions)
    daemon = Daemon(config)
    await daemon.start()
    holder, asker, session_id = await holder_and_asker(config.socket_path, repo)
    try:
        request = ask_for_the_lock(asker, session_id)
        await holder.wait_for("input_lock_requested")
        await asker.close()  # the requester goes away: its call ends with its channel
        await asyncio.gather(request, return_exceptions=True)
        settled = await holder.wait_for("input_lock_requested", 2, within_s=30)
        assert settled.input_lock_requested.state == KEPT  # long before the deadline
        assert lock_story(holder.events) == [
            ("moved", "holder"),
            (PENDING, "asker", "holder"),
            (KEPT, "asker", "holder"),
        ]
        holder.say("the lock is still mine")
        await holder.wait_for("turn_complete")  # and it still takes input
    finally:
        await holder.close()
        await asker.close()
        await daemon.stop()


async def test_a_wait_cut_off_by_a_daemon_kill_is_settled_at_the_restart(
    daemon_process: DaemonProcess, repo: Path
) -> None:
    await asyncio.to_thread(daemon_process.start)
    holder, asker, session_id = await holder_and_asker(daemon_process.socket, repo)
    observer = Client(daemon_process.socket, "observer")
    try:
        request = ask_for_the_lock(asker, session_id)
        pending = await holder.wait_for("input_lock_requested")
        await asyncio.to_thread(daemon_process.kill9)
        await asyncio.gather(request, return_exceptions=True)

        await asyncio.to_thread(daemon_process.start)  # reconciled before it serves
        with closing(sqlite3.connect(daemon_process.root / "data" / "daemon.db")) as db:
            ((stored,),) = db.execute(
                "SELECT MAX(sequence) FROM events WHERE session_id = ?", (session_id,)
            )
        observer.resume(session_id, from_sequence=0)
        await observer.wait_for_sequence(stored)
        replayed = lock_story(observer.events)
        assert replayed == [
            ("moved", "holder"),
            (PENDING, "asker", "holder"),
            ("moved", ""),  # the restart: nobody holds the lock, the wait is over
        ]
        release = observer.of_kind("input_lock")[-1]
        assert release.sequence > pending.sequence
        assert observer.sequences == list(range(1, len(observer.sequences) + 1))
    finally:
        for client in (observer, asker, holder):
            await client.close()
