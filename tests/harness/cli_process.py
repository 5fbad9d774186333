"""`betcode` commands in their own processes, as a user runs them from another terminal: own
config and data directories under the test's folder, SIGINT as a terminal's shell leaves it,
and every thread's stack in the failure when one hangs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Finished:
    code: int
    out: str
    err: str


def _env(tmp_path: Path) -> dict[str, str]:
    # The commands' own config and data stay in tmp_path, never the developer's.
    env = dict(os.environ)
    env.update(
        {
            "BETCODE_CONFIG_DIR": str(tmp_path / "cli-config"),
            "BETCODE_DATA_DIR": str(tmp_path),
            "PYTHONFAULTHANDLER": "1",  # a SIGABRT prints every thread's stack
        }
    )
    return env


@contextlib.contextmanager
def sigint_not_ignored() -> Iterator[None]:
    """A terminal's shell starts a command with SIGINT's default action. A command inherits an
    ignored SIGINT, though, and pytest ignores it when started as a background job of a script
    (`pytest ... &`, nohup): the Ctrl-C of test_timeout_or_ctrl_c_... then never stopped its
    run (it hung until the 90 s limit). A signal with a handler is reset to its default at
    exec, so the command is started while SIGINT has one."""
    before = signal.getsignal(signal.SIGINT)
    if before is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


async def spawn(
    socket: Path, cwd: Path, *args: str, stdin: bytes | None = None
) -> asyncio.subprocess.Process:
    """`betcode ARGS --socket SOCKET` in its own process, as from another terminal."""
    with sigint_not_ignored():
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "betcode.cli.main",
            *args,
            "--socket",
            str(socket),
            cwd=cwd,
            env=_env(cwd.parent),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    if stdin is not None:
        assert process.stdin is not None
        process.stdin.write(stdin)
        process.stdin.close()
    return process


async def finish(process: asyncio.subprocess.Process) -> Finished:
    try:
        out, err = await asyncio.wait_for(process.communicate(), 90)
    except TimeoutError:
        # Say where it is stuck (PYTHONFAULTHANDLER prints every thread's stack at SIGABRT).
        process.send_signal(signal.SIGABRT)
        _, err = await asyncio.wait_for(process.communicate(), 30)
        raise AssertionError(f"betcode did not exit in 90 s; its stacks:\n{err.decode()}") from None
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


async def betcode(socket: Path, cwd: Path, *args: str, stdin: bytes | None = None) -> Finished:
    return await finish(await spawn(socket, cwd, *args, stdin=stdin))
