"""One daemon per data dir, and `daemon status|stop` naming the daemon of the socket they are
asked about — with real daemon processes (a fake claude keeps them fast).

The defects these guard against: a second daemon on the same data dir (another socket) started
and served, its reconciliation idling the first one's live session; a refused start still
reconciled the live database; `status/stop --socket A` trusted a pid file shared by every daemon
of the data dir and stopped the wrong one; a failed start deleted the running daemon's files.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from harness.daemon import Client, DaemonProcess
from harness.fake_claude import FakeClaude

from betcode.composition.startup_checks import EXIT_CANNOT_LISTEN
from betcode.daemon_socket import lock_path_for
from betcode.v1 import agent_pb2

HANG_TURN = [{"do": "text", "text": "working", "deltas": 1}, {"do": "hang"}]


def env_for(root: Path, claude: Path, data: Path, socket: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "BETCODE_CLAUDE_BIN": str(claude),
        "BETCODE_SOCKET": str(socket),
        "BETCODE_DATA_DIR": str(data),
        "BETCODE_CONFIG_DIR": str(root / "config"),
    }


def betcode(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def snapshot(data: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Sessions and events as stored: a reconciliation would change both."""
    with closing(sqlite3.connect(data / "daemon.db")) as db:
        sessions = db.execute("SELECT id, status, input_lock_client FROM sessions").fetchall()
        events = db.execute("SELECT session_id, sequence FROM events ORDER BY 1, 2").fetchall()
    return sessions, events


async def settled_snapshot(data: Path, client: Client) -> tuple[list[tuple[object, ...]], ...]:
    """The snapshot once the live turn's last event (its claude then hangs) is stored."""
    last = (client.session_id, max(client.sequences))
    async with asyncio.timeout(30):
        while last not in (current := snapshot(data))[1]:  # noqa: ASYNC110 - rows in SQLite
            await asyncio.sleep(0.05)
    return current


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """(root, fake claude whose turn streams a little, then hangs: a live turn)."""
    claude = FakeClaude(tmp_path / "fake").binary([{"turns": [HANG_TURN]}])
    return tmp_path, claude


@pytest.fixture
def first(world: tuple[Path, Path]) -> Iterator[DaemonProcess]:
    root, claude = world
    daemon = DaemonProcess(root / "a", env_for(root, claude, root / "data", root / "a.sock"))
    daemon.root.mkdir()
    daemon.start()
    yield daemon
    daemon.stop()


async def live_session(socket: Path) -> Client:
    """A session whose claude is in the middle of a turn, every event of it received (the
    text's one delta, then its end: claude then hangs)."""
    client = Client(socket, "watcher")
    client.converse(agent_pb2.StartConversation(working_directory=str(socket.parent)))
    client.say("go")
    assert (await client.wait_for("text_delta", 2)).text_delta.is_complete
    return client


async def test_a_second_daemon_on_the_data_dir_is_refused_and_changes_nothing(
    world: tuple[Path, Path], first: DaemonProcess
) -> None:
    root, claude = world
    client = await live_session(first.socket)
    try:
        before = await settled_snapshot(root / "data", client)
        lock_before = (root / "data" / "daemon.lock").read_bytes()
        second_env = env_for(root, claude, root / "data", root / "b.sock")
        second = betcode(second_env, "daemon", "start", "--foreground", "--no-import")
        assert second.returncode == EXIT_CANNOT_LISTEN, second.stderr
        assert f"pid {first.process.pid}" in second.stderr  # type: ignore[union-attr]
        assert str(first.socket) in second.stderr
        assert "is using the data dir" in second.stderr
        assert not (root / "b.sock").exists()
        # Nothing reconciled: the live session is still running, no event was appended.
        assert snapshot(root / "data") == before
        assert (root / "data" / "daemon.lock").read_bytes() == lock_before
        # The first daemon still serves.
        status = betcode(first.env, "daemon", "status")
        assert status.returncode == 0, status.stdout
        assert f"pid {first.process.pid}" in status.stdout  # type: ignore[union-attr]
    finally:
        await client.close()


async def test_a_detached_second_start_says_which_daemon_holds_the_data_dir(
    world: tuple[Path, Path], first: DaemonProcess
) -> None:
    root, claude = world
    second = betcode(env_for(root, claude, root / "data", root / "b.sock"), "daemon", "start")
    assert second.returncode == EXIT_CANNOT_LISTEN
    assert f"exited with code {EXIT_CANNOT_LISTEN} during startup" in second.stderr
    assert f"pid {first.process.pid}, socket {first.socket}" in second.stderr  # type: ignore[union-attr]


def test_a_bad_listen_address_is_refused_before_the_database_is_touched(
    world: tuple[Path, Path], first: DaemonProcess
) -> None:
    root, claude = world
    before = snapshot(root / "data")
    refused = betcode(
        env_for(root, claude, root / "data", root / "b.sock"),
        *("daemon", "start", "--foreground", "--no-import", "--listen", "192.0.2.1:50051"),
    )
    assert refused.returncode == EXIT_CANNOT_LISTEN
    assert "only loopback addresses are allowed" in refused.stderr
    assert snapshot(root / "data") == before
    # On a fresh data dir it does not even create the directory.
    fresh = betcode(
        env_for(root, claude, root / "fresh", root / "c.sock"),
        *("daemon", "start", "--foreground", "--no-import", "--listen", "example.com:1"),
    )
    assert fresh.returncode == EXIT_CANNOT_LISTEN
    assert not (root / "fresh").exists()


def test_a_failed_start_on_the_same_socket_leaves_the_running_daemons_files(
    world: tuple[Path, Path], first: DaemonProcess
) -> None:
    root, claude = world
    socket_inode = os.stat(first.socket).st_ino
    socket_lock = lock_path_for(first.socket).read_bytes()
    data_lock = (root / "data" / "daemon.lock").read_bytes()
    # Same socket and data dir, then same socket with another data dir: both refused.
    for data in (root / "data", root / "other-data"):
        again = betcode(
            env_for(root, claude, data, first.socket), "daemon", "start", "--foreground"
        )
        assert again.returncode == EXIT_CANNOT_LISTEN, again.stderr
    assert os.stat(first.socket).st_ino == socket_inode
    assert lock_path_for(first.socket).read_bytes() == socket_lock
    assert (root / "data" / "daemon.lock").read_bytes() == data_lock
    status = betcode(first.env, "daemon", "status")
    assert status.returncode == 0
    assert f"daemon running (pid {first.process.pid}" in status.stdout  # type: ignore[union-attr]


def test_status_and_stop_name_the_daemon_of_the_socket_they_are_given(
    world: tuple[Path, Path], first: DaemonProcess
) -> None:
    root, claude = world
    other = DaemonProcess(root / "c", env_for(root, claude, root / "data-c", root / "c.sock"))
    other.root.mkdir()
    other.start()
    try:
        assert first.process is not None
        assert other.process is not None
        status_a = betcode(first.env, "daemon", "status", "--socket", str(first.socket))
        status_c = betcode(first.env, "daemon", "status", "--socket", str(other.socket))
        assert f"pid {first.process.pid}, socket {first.socket}" in status_a.stdout
        assert f"data dir {root / 'data'}" in status_a.stdout
        assert f"pid {other.process.pid}, socket {other.socket}" in status_c.stdout

        stopped = betcode(first.env, "daemon", "stop", "--socket", str(first.socket))
        assert stopped.returncode == 0, stopped.stderr
        assert f"daemon stopped (pid {first.process.pid}" in stopped.stdout
        assert first.process.wait(10) == 0
        assert other.process.poll() is None  # the other one was not touched
        gone = betcode(first.env, "daemon", "status", "--socket", str(first.socket))
        assert gone.returncode == 1
        assert "daemon is not running" in gone.stdout
        still = betcode(first.env, "daemon", "status", "--socket", str(other.socket))
        assert still.returncode == 0
    finally:
        other.stop()


@pytest.fixture
def silent_holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A process that holds a socket's lock (writing its pid, as a daemon does) but never
    answers on the socket: a daemon that is starting, stopping or stuck."""
    socket = tmp_path / "stuck.sock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "f.write(f'{os.getpid()}\\n'); f.flush(); print('locked', flush=True); "
            "sys.stdin.read()",
            str(lock_path_for(socket)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    yield socket, holder
    if holder.poll() is None:
        holder.kill()
    holder.wait(10)


def test_a_daemon_that_holds_its_socket_without_answering_is_found_by_its_lock(
    tmp_path: Path, silent_holder: tuple[Path, subprocess.Popen[str]]
) -> None:
    socket, holder = silent_holder
    env = env_for(tmp_path, tmp_path / "unused-claude", tmp_path / "data", socket)
    status = betcode(env, "daemon", "status")
    assert status.returncode == 1
    assert f"daemon pid {holder.pid} holds {socket} but does not answer" in status.stdout
    stopped = betcode(env, "daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert holder.wait(10) == -signal.SIGTERM


def test_no_daemon_and_no_lock_holder_is_not_running(tmp_path: Path) -> None:
    socket = tmp_path / "nobody.sock"
    lock_path_for(socket).write_text("12345\n")  # left by a daemon long gone: not held
    env = env_for(tmp_path, tmp_path / "unused-claude", tmp_path / "data", socket)
    status = betcode(env, "daemon", "status")
    assert status.returncode == 1
    assert f"daemon is not running (socket {socket})" in status.stdout
    stopped = betcode(env, "daemon", "stop")
    assert stopped.returncode == 0
    assert "daemon is not running" in stopped.stdout
