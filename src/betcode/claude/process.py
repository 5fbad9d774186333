"""One `claude` child: spawned in its own process group, stdout framed into line batches,
stderr always drained (and its tail kept), stdin written with backpressure.

The process group matters: kill -9 of the CLI alone leaves its running tools alive, still
holding our pipes (docs/PROTOCOL.md#process-lifecycle). So every signal goes to the whole group, and
once the CLI itself has exited whatever is left of its group is killed too.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from betcode.protocol.framing import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_READ_CHUNK_BYTES,
    Line,
    LineFramer,
    iter_line_batches,
)
from betcode.spawn import PIPE, Child, spawn

logger = logging.getLogger(__name__)

LinesCallback = Callable[[list[Line]], None]

STDERR_TAIL_LINES = 50
STDERR_LINE_MAX_BYTES = 4096
STDERR_CHUNK_BYTES = 64 * 1024
# After the CLI exits, how long its pipes may stay open before we stop reading them (only a
# process that left the group, e.g. a daemonized tool, can hold them that long).
PIPE_DRAIN_SECONDS = 2.0


class ClaudeStartError(Exception):
    """claude could not be started (missing working directory, binary not executable, ...)."""


MOVE_ADVICE = "restore it, or move the session: betcode sessions move SESSION DIR"


class WorkdirMissing(ClaudeStartError):
    """A session's working directory is gone: claude cannot start there."""

    def __init__(self, cwd: Path, what: str = "working directory") -> None:
        super().__init__(f"Cannot spawn Claude: {what} does not exist: {cwd}; {MOVE_ADVICE}")
        self.cwd = cwd


class WorktreeMissing(WorkdirMissing):
    """A session's worktree directory is gone (or is no longer a git checkout): claude is
    never started there, where git would fall through to an enclosing checkout."""

    def __init__(self, cwd: Path) -> None:
        super().__init__(cwd, "worktree directory")


async def require_workdir(cwd: Path, *, worktree: bool) -> None:
    """Raise ClaudeStartError unless claude can run in `cwd`; for a worktree session that
    also means the directory is still a git checkout (its `.git` file is there)."""
    if worktree:
        if not await asyncio.to_thread(_is_checkout, cwd):
            raise WorktreeMissing(cwd)
    elif not await asyncio.to_thread(Path(cwd).is_dir):
        raise WorkdirMissing(cwd)


def _is_checkout(cwd: Path) -> bool:
    return cwd.is_dir() and (cwd / ".git").exists()


class ClaudeStdinClosed(Exception):
    """claude no longer reads its stdin (it exited, or we closed its input)."""


def describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class ProcessGroupLeader(abc.ABC):
    """A claude that leads its own process group (pgid = its pid), whether the daemon's own
    child or one under a holder: stopping it signals the whole group, so the tools it started
    stop with it."""

    @property
    @abc.abstractmethod
    def pid(self) -> int: ...

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None: ...

    @abc.abstractmethod
    async def wait(self) -> int: ...

    @abc.abstractmethod
    async def exited_within(self, seconds: float) -> bool: ...

    async def terminate(self, grace: float) -> int:
        """SIGTERM to the process group, `grace` seconds, then SIGKILL to the group."""
        if self.returncode is None:
            self._signal_group(signal.SIGTERM)
            if not await self.exited_within(grace):
                logger.warning(
                    "claude pid %d ignored SIGTERM for %.1f s; sending SIGKILL", self.pid, grace
                )
                self._signal_group(signal.SIGKILL)
        return await self.wait()

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)


class ClaudeProcess(ProcessGroupLeader):
    """A single claude child. `on_lines` is called on the event loop with each stdout batch."""

    def __init__(
        self,
        on_lines: LinesCallback,
        *,
        max_line_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        chunk_size: int = DEFAULT_READ_CHUNK_BYTES,
    ) -> None:
        self._on_lines = on_lines
        self._framer = LineFramer(max_line_bytes)
        self._chunk_size = chunk_size
        self._child: Child | None = None
        self._finished: asyncio.Task[int] | None = None
        self._stderr_tail = StderrTail(lambda: self.pid)
        self._stdin_closed = False
        self.last_output_at = time.monotonic()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], *, worktree: bool = False
    ) -> None:
        """`worktree`: `cwd` is a git worktree, which must still be there (see WorktreeMissing).
        Every claude process starts here, so nothing can skip that check."""
        if self._child is not None:
            raise RuntimeError("a ClaudeProcess is started once")
        await require_workdir(cwd, worktree=worktree)
        try:
            child = await spawn(
                argv,
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                cwd=cwd,
                env=env,
                limit=self._chunk_size,
            )
        except OSError as error:
            raise ClaudeStartError(f"cannot start claude ({argv[0]}): {error}") from error
        self._child = child
        self.last_output_at = time.monotonic()
        stdout, stderr = child.stdout, child.stderr
        if stdout is None or stderr is None:
            raise RuntimeError("claude was started without stdout/stderr pipes")
        pumps = (
            asyncio.create_task(self._pump_stdout(stdout), name=f"claude-{self.pid}-stdout"),
            asyncio.create_task(self._pump_stderr(stderr), name=f"claude-{self.pid}-stderr"),
        )
        self._finished = asyncio.create_task(
            self._finish(child, pumps), name=f"claude-{self.pid}-exit"
        )

    async def _finish(
        self, child: Child, pumps: tuple[asyncio.Task[None], asyncio.Task[None]]
    ) -> int:
        # The exit, not the end of the pipes: a surviving grandchild can hold those forever.
        returncode = await child.wait()
        self._signal_group(signal.SIGKILL)  # leftovers of this CLI are orphans now
        _, pending = await asyncio.wait(pumps, timeout=PIPE_DRAIN_SECONDS)
        for pump in pending:
            logger.warning(
                "claude pid %d exited but a process outside its group still holds its "
                "output; no longer reading it",
                self.pid,
            )
            pump.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        child.close()
        return returncode

    async def wait(self) -> int:
        """The exit status, once the CLI exited and everything it printed was delivered."""
        if self._finished is None:
            raise RuntimeError("claude was not started")
        return await asyncio.shield(self._finished)

    async def exited_within(self, seconds: float) -> bool:
        """Whether the CLI itself exits within `seconds` (its output may still be draining)."""
        if self._child is None:
            raise RuntimeError("claude was not started")
        try:
            await asyncio.wait_for(self._child.wait(), seconds)
        except TimeoutError:
            return False
        return True

    # -- properties -------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        if self._child is None:
            raise RuntimeError("claude was not started")
        return self._child.pid

    @property
    def returncode(self) -> int | None:
        """Set as soon as the CLI exits (before its output is fully delivered)."""
        return None if self._child is None else self._child.returncode

    @property
    def stderr_tail(self) -> list[str]:
        """The last lines claude wrote to stderr (for crash reports)."""
        return list(self._stderr_tail.lines)

    # -- stdin ------------------------------------------------------------------------------
    async def write(self, data: bytes) -> None:
        """Write complete NDJSON lines and wait until the pipe has taken them."""
        if not data.endswith(b"\n"):
            raise ValueError("claude stdin takes complete lines: data must end with a newline")
        if self._child is None or self._child.stdin is None:
            raise RuntimeError("claude was not started")
        stdin = self._child.stdin
        if self._stdin_closed or self.returncode is not None or stdin.is_closing():
            raise ClaudeStdinClosed(f"claude pid {self.pid} no longer accepts input")
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise ClaudeStdinClosed(
                f"claude pid {self.pid} stopped reading its input: {error}"
            ) from error

    def close_stdin(self) -> None:
        """EOF on claude's stdin: it finishes the running turn, then exits."""
        if self._child is not None:
            self._stdin_closed = True
            self._child.close_stdin()

    # -- pumps ------------------------------------------------------------------------------
    async def _pump_stdout(self, stream: asyncio.StreamReader) -> None:
        try:
            async for batch in iter_line_batches(stream, self._framer, self._chunk_size):
                self.last_output_at = time.monotonic()
                try:
                    self._on_lines(batch)
                except Exception:
                    logger.exception("claude pid %d: the line consumer failed", self.pid)
        except Exception:
            # Never leave the pipe undrained: a full pipe would block claude.
            logger.exception("claude pid %d: stdout framing failed; discarding output", self.pid)
            while await stream.read(self._chunk_size):
                self.last_output_at = time.monotonic()

    async def _pump_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(STDERR_CHUNK_BYTES):
            self._stderr_tail.feed(chunk)
        self._stderr_tail.finish()


class StderrTail:
    """claude's stderr, split into lines: each is logged, the last ones are kept (only the
    head of an endless line is)."""

    def __init__(self, pid: Callable[[], int]) -> None:
        self._pid = pid
        self._partial = bytearray()
        self.lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    def feed(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            self._line(bytes(self._partial) + piece)
            self._partial.clear()
        self._partial += rest[: max(0, STDERR_LINE_MAX_BYTES - len(self._partial))]

    def finish(self) -> None:
        if self._partial:
            self._line(bytes(self._partial))
            self._partial.clear()

    def add(self, text: str) -> None:
        """A line of our own about the process (e.g. why it was lost)."""
        self.lines.append(text)

    def _line(self, raw: bytes) -> None:
        text = raw[:STDERR_LINE_MAX_BYTES].decode("utf-8", "replace").rstrip("\r")
        if text.strip():
            self.lines.append(text)
            logger.warning("claude pid %d stderr: %s", self._pid(), text)
