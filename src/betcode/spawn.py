"""Child processes for the daemon, started the same way on every event loop.

The loop's own ``subprocess_exec`` is not used: uvloop forks through libuv and then runs the
interpreter's after-fork hooks in the child, where grpc's hooks meet locks that grpc's threads
held at fork time, so a child could die (SIGSEGV, seen in tests) before it ever ran claude.
``subprocess.Popen`` runs no Python between fork and exec (it uses vfork when it can), so every
child starts through it, and its pipes are then attached to the running loop. A thread per child
waits for its exit status, as asyncio's default child watcher does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
DEFAULT_READ_LIMIT = 64 * 1024  # a StreamReader pauses its pipe at twice this much buffered


class Child:
    """A started child: its pipes as asyncio streams and its exit status as a future."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader | None,
        exited: asyncio.Future[int],
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._popen = popen
        self._transports = transports
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.exited = exited  # the status as soon as the process exits; its pipes may stay open

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """Negative for a signal (like subprocess); None while it runs."""
        return self.exited.result() if self.exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)

    async def communicate(self) -> tuple[bytes, bytes]:
        """Everything it writes to its piped stdout and stderr, once it has exited."""
        out, err = await asyncio.gather(_read_all(self.stdout), _read_all(self.stderr))
        await self.wait()
        return out, err

    def close_stdin(self) -> None:
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.close()

    def close(self) -> None:
        """Let go of every pipe, read to the end or not (e.g. held open by a grandchild)."""
        for transport in self._transports:
            transport.close()


async def spawn(
    argv: Sequence[str],
    *,
    stdin: int = DEVNULL,
    stdout: int = DEVNULL,
    stderr: int = DEVNULL,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    limit: int = DEFAULT_READ_LIMIT,
) -> Child:
    """Start ``argv`` in a new session (its own process group, pgid = pid). Each stream is
    ``PIPE`` or ``DEVNULL``. Raises OSError when it cannot be started."""
    loop = asyncio.get_running_loop()
    # On the loop, as asyncio's own subprocess_exec does: vfork + exec takes well under 1 ms,
    # and a cancelled caller cannot leave a child behind that nobody knows of.
    popen = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    exited: asyncio.Future[int] = loop.create_future()
    threading.Thread(
        target=_wait_for_exit, args=(popen, loop, exited), name=f"wait-{popen.pid}", daemon=True
    ).start()
    transports: list[asyncio.BaseTransport] = []
    try:
        writer = None if popen.stdin is None else await _writer(loop, popen.stdin, transports)
        out = None if popen.stdout is None else await _reader(loop, popen.stdout, limit, transports)
        err = None if popen.stderr is None else await _reader(loop, popen.stderr, limit, transports)
    except BaseException:
        popen.kill()
        for transport in transports:
            transport.close()
        for pipe in (popen.stdin, popen.stdout, popen.stderr):
            if pipe is not None:
                pipe.close()  # also those no transport took over yet
        raise
    return Child(popen, writer, out, err, exited, transports)


def _wait_for_exit(
    popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, exited: asyncio.Future[int]
) -> None:
    returncode = popen.wait()
    with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody is waiting
        loop.call_soon_threadsafe(_settle, exited, returncode)


def _settle(exited: asyncio.Future[int], returncode: int) -> None:
    if not exited.done():
        exited.set_result(returncode)


class _PipeEnd:
    """One end of a child's pipe as the loop takes it: a descriptor of its own (a duplicate;
    the Popen's file object is closed at once), closed once, and only while it is that pipe.

    uvloop closes a pipe's descriptor itself (libuv), then calls the object's close() too,
    or, when the transport is collected unclosed, never: a Popen file object then closed the
    number at its own collection, maybe much later, when the number was another file's (an
    SQLite database's, seen as SQLITE_IOERR_FSTAT at daemon start). This object has no
    finalizer, and its close() leaves alone a number that now names another file."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._fd = os.dup(pipe.fileno())
        pipe.close()
        found = os.fstat(self._fd)
        self._identity = (found.st_dev, found.st_ino)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            found = os.fstat(fd)
        except OSError:
            return  # closed already (by libuv)
        if (found.st_dev, found.st_ino) == self._identity:
            os.close(fd)


async def _reader(
    loop: asyncio.AbstractEventLoop,
    pipe: IO[bytes],
    limit: int,
    transports: list[asyncio.BaseTransport],
) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    end = _PipeEnd(pipe)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), end
        )
    except BaseException:
        end.close()
        raise
    transports.append(transport)
    return reader


async def _writer(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes], transports: list[asyncio.BaseTransport]
) -> asyncio.StreamWriter:
    # StreamReaderProtocol brings the flow control that StreamWriter.drain() waits on; its
    # reader stays unused (nothing is read from a write pipe).
    end = _PipeEnd(pipe)
    try:
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
            end,
        )
    except BaseException:
        end.close()
        raise
    transports.append(transport)
    return asyncio.StreamWriter(transport, protocol, None, loop)


async def _read_all(stream: asyncio.StreamReader | None) -> bytes:
    return b"" if stream is None else await stream.read()
