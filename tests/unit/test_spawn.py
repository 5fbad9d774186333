"""betcode.spawn on both event loops the daemon can run on: pipes, exit statuses, process
groups, a grandchild holding the pipes, and spawning next to a busy grpc.aio server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from betcode import event_loop
from betcode.spawn import PIPE, spawn

LOOPS = pytest.mark.parametrize("loop_name", ["uvloop", "asyncio"])


def run_on(loop_name: str, test: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await test()

    return event_loop.run(main(), loop_name)


@LOOPS
def test_stdin_reaches_the_child_and_its_stdout_comes_back(loop_name: str) -> None:
    async def test() -> tuple[bytes, int]:
        child = await spawn(["cat"], stdin=PIPE, stdout=PIPE)
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(b"one\ntwo\n")
        await child.stdin.drain()
        child.close_stdin()
        out = await child.stdout.read()
        return out, await child.wait()

    assert run_on(loop_name, test) == (b"one\ntwo\n", 0)


@LOOPS
def test_exit_codes_and_signals_are_reported_like_subprocess(loop_name: str) -> None:
    async def test() -> tuple[int, int, int | None]:
        exits_3 = await spawn(["sh", "-c", "exit 3"])
        killed = await spawn(["sh", "-c", "kill -9 $$"])
        still = await spawn(["sleep", "30"])
        running = still.returncode
        os.killpg(still.pid, signal.SIGTERM)
        await still.wait()
        return await exits_3.wait(), await killed.wait(), running

    assert run_on(loop_name, test) == (3, -signal.SIGKILL, None)


@LOOPS
def test_the_child_leads_its_own_process_group(loop_name: str) -> None:
    async def test() -> tuple[int, int]:
        child = await spawn(["sleep", "30"])
        group = os.getpgid(child.pid)
        os.killpg(child.pid, signal.SIGKILL)
        await child.wait()
        return child.pid, group

    pid, group = run_on(loop_name, test)
    assert group == pid != os.getpgid(0)


@LOOPS
def test_the_exit_is_reported_while_a_grandchild_still_holds_the_pipes(loop_name: str) -> None:
    async def test() -> tuple[int, bool]:
        child = await spawn(["sh", "-c", "sleep 30 & echo started; exit 0"], stdout=PIPE)
        assert child.stdout is not None
        assert await child.stdout.readline() == b"started\n"
        status = await asyncio.wait_for(child.wait(), 10)
        at_eof = child.stdout.at_eof()
        os.killpg(child.pid, signal.SIGKILL)  # the sleep, still in the child's group
        child.close()
        return status, at_eof

    assert run_on(loop_name, test) == (0, False)


@LOOPS
def test_a_program_that_cannot_run_raises_oserror(loop_name: str, tmp_path: Path) -> None:
    not_executable = tmp_path / "claude"
    not_executable.write_text("#!/bin/sh\n")

    async def test() -> list[str]:
        raised = []
        for argv in ([str(tmp_path / "missing")], [str(not_executable)]):
            try:
                await spawn(argv)
            except OSError as error:
                raised.append(type(error).__name__)
        return raised

    assert run_on(loop_name, test) == ["FileNotFoundError", "PermissionError"]


@LOOPS
def test_children_start_cleanly_next_to_a_busy_grpc_server(loop_name: str, tmp_path: Path) -> None:
    """uvloop's own subprocess support runs Python in the forked child, where grpc's after-fork
    hooks could crash it (SIGSEGV) before exec; spawn() must never lose a child that way."""
    socket = f"unix:{tmp_path / 'grpc.sock'}"

    async def test() -> list[int]:
        server = grpc.aio.server()
        server.add_insecure_port(socket)
        await server.start()
        channel = grpc.aio.insecure_channel(socket)
        ping = channel.unary_unary("/test.Nothing/Ping")
        stop = asyncio.Event()

        async def hammer() -> None:
            while not stop.is_set():
                with contextlib.suppress(grpc.aio.AioRpcError):  # UNIMPLEMENTED: traffic is all
                    await ping(b"", timeout=1)

        traffic = [asyncio.create_task(hammer()) for _ in range(4)]
        try:
            statuses = []
            for _ in range(40):
                child = await spawn(["true"])
                statuses.append(await child.wait())
            return statuses
        finally:
            stop.set()
            await asyncio.gather(*traffic)
            await channel.close()
            await server.stop(None)

    assert run_on(loop_name, test) == [0] * 40


@LOOPS
def test_a_child_dropped_unclosed_never_closes_a_descriptor_another_file_has_now(
    loop_name: str, tmp_path: Path
) -> None:
    """A Child whose pipes were read to the end and that is dropped without close() (as the
    `claude --version` probe's is): its descriptors are closed once, and files opened later
    that got their numbers keep them. Before, uvloop closed them when it collected the
    transports and the Popen's file objects closed the same numbers again when it collected
    them: at daemon start that was an SQLite database's (SQLITE_IOERR_FSTAT)."""

    async def test() -> list[int]:
        child = await spawn(["echo", "hi"], stdout=PIPE, stderr=PIPE)
        await child.communicate()
        popen = child._popen
        del child
        gc.collect()
        await asyncio.sleep(0.05)
        gc.collect()
        # Take the numbers that were freed (a blocking open is what is tested here).
        files = [open(tmp_path / f"file{n}", "wb") for n in range(8)]  # noqa: SIM115, ASYNC230
        del popen
        gc.collect()
        closed_under_them = []
        for file in files:
            try:
                os.fstat(file.fileno())
            except OSError:
                closed_under_them.append(file.fileno())
            with contextlib.suppress(OSError):
                file.close()
        return closed_under_them

    assert run_on(loop_name, test) == []
