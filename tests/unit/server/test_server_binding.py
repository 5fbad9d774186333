"""Binding on real sockets: paths, modes, the lock, stale and foreign sockets, loopback TCP."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2 as std_pb2
from grpc_health.v1 import health_pb2_grpc as std_grpc
from server_harness import connect, make_daemon

from betcode.daemon_socket import (
    BindError,
    DaemonAlreadyRunning,
    LoopbackAddress,
    lock_path_for,
    parse_listen_address,
)


def _exists(path: Path) -> bool:
    # Sync helpers keep blocking file-system calls out of the async tests' own bodies.
    return path.exists()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(text)


def _read(path: Path) -> str:
    return path.read_text()


async def _serving(target: str) -> bool:
    async with connect(target) as channel:
        response = await std_grpc.HealthStub(channel).Check(std_pb2.HealthCheckRequest())
    return bool(response.status == std_pb2.HealthCheckResponse.SERVING)


async def test_directories_are_private_and_the_socket_owner_only(
    short_dir: Path, socket_path: Path
) -> None:
    server = make_daemon()
    await server.start(socket_path)
    try:
        assert stat.S_ISSOCK(os.stat(socket_path).st_mode)
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        for created in (short_dir / "run", short_dir / "run" / "betcode"):
            assert stat.S_IMODE(os.stat(created).st_mode) == 0o700
        assert await _serving(f"unix:{socket_path}")
    finally:
        await server.stop(grace_s=0)
    assert not _exists(socket_path)


async def test_a_second_daemon_is_refused_and_the_first_keeps_serving(socket_path: Path) -> None:
    first = make_daemon()
    await first.start(socket_path)
    inode = os.stat(socket_path).st_ino
    try:
        with pytest.raises(DaemonAlreadyRunning, match=f"pid {os.getpid()}"):
            await make_daemon().start(socket_path)
        assert os.stat(socket_path).st_ino == inode
        assert await _serving(f"unix:{socket_path}")
    finally:
        await first.stop(grace_s=0)

    # Stopping releases the lock: the path can be served again.
    again = make_daemon()
    await again.start(socket_path)
    await again.stop(grace_s=0)


@pytest.fixture
def lock_held_by_another_process(socket_path: Path) -> Iterator[None]:
    socket_path.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); sys.stdin.read()",
            str(lock_path_for(socket_path)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    yield
    holder.communicate("")


@pytest.mark.usefixtures("lock_held_by_another_process")
async def test_a_lock_held_by_another_process_is_refused(socket_path: Path) -> None:
    with pytest.raises(DaemonAlreadyRunning, match="already serving"):
        await make_daemon().start(socket_path)
    assert not _exists(socket_path)


def _leave_stale_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listening, then closed: the file stays behind


async def test_a_stale_socket_is_replaced(socket_path: Path) -> None:
    _leave_stale_socket(socket_path)
    server = make_daemon()
    await server.start(socket_path)
    try:
        assert await _serving(f"unix:{socket_path}")
    finally:
        await server.stop(grace_s=0)


async def test_a_listener_without_our_lock_is_left_alone(socket_path: Path) -> None:
    socket_path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as foreign:
        foreign.bind(str(socket_path))
        foreign.listen()
        with pytest.raises(DaemonAlreadyRunning, match="already listening"):
            await make_daemon().start(socket_path)
        assert stat.S_ISSOCK(os.stat(socket_path).st_mode)


async def test_a_regular_file_at_the_path_is_an_error(socket_path: Path) -> None:
    _write(socket_path, "notes")
    with pytest.raises(BindError, match="exists and is not a socket"):
        await make_daemon().start(socket_path)
    assert _read(socket_path) == "notes"


async def test_a_path_too_long_for_a_socket_is_an_error(short_dir: Path) -> None:
    with pytest.raises(BindError, match=r"longer than the 107 bytes .* --socket"):
        await make_daemon().start(short_dir / ("d" * 120) / "daemon.sock")
    assert os.listdir(short_dir) == []


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:50051", LoopbackAddress("127.0.0.1", 50051)),
        ("127.0.0.2:0", LoopbackAddress("127.0.0.2", 0)),
        ("[::1]:50051", LoopbackAddress("::1", 50051)),
        ("localhost:8080", LoopbackAddress("localhost", 8080)),
    ],
)
def test_loopback_addresses_are_accepted(address: str, expected: LoopbackAddress) -> None:
    assert parse_listen_address(address) == expected


@pytest.mark.parametrize(
    "address", ["0.0.0.0:50051", "[::]:50051", "192.168.1.5:50051", "example.com:1", ":50051"]
)
def test_other_addresses_are_refused(address: str) -> None:
    with pytest.raises(BindError, match="only loopback addresses"):
        parse_listen_address(address)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ""])
def test_malformed_addresses_are_refused(address: str) -> None:
    with pytest.raises(BindError, match="expected HOST:PORT"):
        parse_listen_address(address)


def test_ipv6_target_is_bracketed() -> None:
    assert LoopbackAddress("::1", 5).target == "[::1]:5"
    assert LoopbackAddress("127.0.0.1", 5).target == "127.0.0.1:5"


async def test_loopback_tcp_serves_alongside_the_socket(socket_path: Path) -> None:
    server = make_daemon()
    await server.start(socket_path, listen="127.0.0.1:0")
    try:
        assert server.tcp_port
        assert await _serving(f"127.0.0.1:{server.tcp_port}")
        assert await _serving(f"unix:{socket_path}")
    finally:
        await server.stop(grace_s=0)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback (::1)")
async def test_the_ipv6_loopback_serves(socket_path: Path) -> None:
    server = make_daemon()
    await server.start(socket_path, listen="[::1]:0")
    try:
        assert await _serving(f"[::1]:{server.tcp_port}")
    finally:
        await server.stop(grace_s=0)


async def test_a_busy_tcp_port_fails_cleanly(socket_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(BindError, match=f"cannot listen on 127.0.0.1:{port}"):
            await make_daemon().start(socket_path, listen=f"127.0.0.1:{port}")
    # Nothing left bound, and the lock was released.
    assert not _exists(socket_path)
    server = make_daemon()
    await server.start(socket_path)
    await server.stop(grace_s=0)


async def test_a_non_loopback_listen_fails_before_touching_the_socket(socket_path: Path) -> None:
    with pytest.raises(BindError, match="only loopback"):
        await make_daemon().start(socket_path, listen="0.0.0.0:50051")
    assert not socket_path.parent.exists()
