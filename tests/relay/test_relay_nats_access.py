"""Who reaches the relay's NATS, with the real nats-server: the embedded server admits only the
relay's generated credentials (kept 0600) on loopback; a relay given a NATS without
credentials, without TLS to another host, or open to anyone, refuses to start and says why; a
relay killed with SIGKILL and started again leaves exactly one nats-server on its store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import nats
import pytest
from harness.relay import RelayProcess, betcode_argv, relay_in_process
from nats.errors import Error as NatsError

from betcode.relay.nats_server import dies_with_parent, free_port, nats_server_binary

pytestmark = pytest.mark.timeout(180)


async def _connects(url: str) -> bool:
    try:
        nc = await nats.connect(
            servers=[url], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0
        )
    except (NatsError, OSError):
        return False
    await nc.close()
    return True


async def test_the_embedded_nats_admits_only_the_relays_credentials(tmp_path: Path) -> None:
    async with relay_in_process(tmp_path / "relay") as relay:
        server = relay.nats_server
        assert server is not None
        port = server.port
        assert not await _connects(f"nats://127.0.0.1:{port}")
        assert not await _connects(f"nats://betcode-relay:wrong-password@127.0.0.1:{port}")
        assert not await _connects(f"nats://{server.credentials.password}@127.0.0.1:{port}")
        assert await _connects(server.url)  # the relay's own credentials do connect
        for private in (server.config_file, tmp_path / "relay" / "nats" / "credentials.json"):
            assert private.stat().st_mode & 0o777 == 0o600
        config = json.loads(server.config_file.read_text())
        assert config["listen"] == f"127.0.0.1:{port}"


def _start_refused(relay_dir: Path, *args: str) -> str:
    finished = subprocess.run(
        betcode_argv(
            "relay",
            "start",
            "--dir",
            str(relay_dir),
            "--listen",
            "127.0.0.1:0",
            "--tunnel-listen",
            "127.0.0.1:0",
            *args,
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 1, finished.stdout + finished.stderr
    assert "listening" not in finished.stdout
    return finished.stderr


async def test_a_relay_refuses_a_nats_without_credentials_or_tls(tmp_path: Path) -> None:
    """Against a real nats-server that admits anyone (as the old cluster example had it)."""
    relay = RelayProcess(tmp_path / "relay")
    relay.init()
    port = free_port()
    open_server = await asyncio.create_subprocess_exec(
        str(nats_server_binary()),
        "-a",
        "127.0.0.1",
        "-p",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not await _connects(f"nats://127.0.0.1:{port}"):  # noqa: ASYNC110 - a server
            await asyncio.sleep(0.05)
        refused = {
            f"nats://127.0.0.1:{port}": "has no credentials",
            f"nats://someone:secret@127.0.0.1:{port}": "admits connections without credentials",
            f"nats://token@127.0.0.1:{port}": "admits connections without credentials",
            "nats://someone:secret@192.0.2.7:4222": "is not on this host and not TLS",
            f"http://someone:secret@127.0.0.1:{port}": "must start with nats:// or tls://",
        }
        for url, why in refused.items():
            err = await asyncio.to_thread(_start_refused, relay.root, "--nats", url)
            assert why in err, (url, err)
            assert "secret" not in err  # the password is never echoed
    finally:
        open_server.terminate()
        await open_server.wait()


def _nats_servers_on(store: Path) -> list[int]:
    config = str(store / "nats.conf")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"nats-server") and config.encode() in argv:
            found.append(int(entry.name))
    return found


async def _until_no_server_on(store: Path) -> None:
    async with asyncio.timeout(10):
        while _nats_servers_on(store):  # noqa: ASYNC110 - processes, no event to wait on
            await asyncio.sleep(0.05)


def _stray_server(store: Path) -> subprocess.Popen[bytes]:
    """A nats-server on the store's config that outlived its relay (where the kernel does not
    end it with its parent), its pid where the relay keeps it."""
    stray = subprocess.Popen(
        [str(nats_server_binary()), "-c", str(store / "nats.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    (store / "nats-server.pid").write_text(f"{stray.pid}\n")
    return stray


async def test_a_relay_killed_and_restarted_three_times_leaves_one_nats_server(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path / "relay")
    store = relay.root / "nats"
    strays: list[subprocess.Popen[bytes]] = []
    try:
        await asyncio.to_thread(relay.start)
        for _ in range(3):
            assert relay.process is not None
            os.kill(relay.process.pid, signal.SIGKILL)  # the relay alone, as a crash does
            relay.process.wait(10)
            if dies_with_parent():
                await _until_no_server_on(store)  # the kernel ended it with the relay
            else:
                assert len(_nats_servers_on(store)) == 1  # orphaned, still on the store
            # A server that outlived its relay anyway: the next relay ends it.
            stray = _stray_server(store) if not _nats_servers_on(store) else None
            strays += [stray] if stray is not None else []
            async with asyncio.timeout(10):
                while not _nats_servers_on(store):  # noqa: ASYNC110 - its exec under way
                    await asyncio.sleep(0.01)
            assert len(_nats_servers_on(store)) == 1
            relay.url = relay.tunnel_url = ""
            await asyncio.to_thread(relay.start)
            assert len(_nats_servers_on(store)) == 1
            if stray is not None:
                assert stray.wait(10) is not None  # it was the one ended
        # A second relay on the same directory would start a second server: refused.
        err = await asyncio.to_thread(_start_refused, relay.root)
        assert "in use by a running relay" in err
        assert len(_nats_servers_on(store)) == 1
    finally:
        relay.stop()
        for stray in strays:  # a failed run leaves none behind
            if stray.poll() is None:
                stray.kill()
                stray.wait(10)
    assert _nats_servers_on(store) == []
