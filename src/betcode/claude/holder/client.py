"""The daemon's side of a holder (holder.py): one claude that runs under a holder process.

`HeldClaude` does for the supervisor what `ClaudeProcess` does (same methods), with claude's
pipes reached through the holder's socket. It frames the stdout bytes the holder sends into
lines, and tells the session where each line ends in claude's stdout (`StdoutMark`): the
session stores that offset in the same commit as the line (`holder_positions`). A daemon that
starts again attaches at the stored offset, so each line is ingested exactly once whatever the
daemon went through. The holder is told what is committed only every ACK_STEPS_PER_SPOOL-th of
its spool bound (and at claude's exit): it needs to hear it only to free spool segments and to
know when to exit, and telling it per commit woke it, and cost the loop a send, for every line.

Lines for claude's stdin go the other way exactly once: each is committed to the session's
`StdinJournal` under a key (`stdin_key`) before it is sent, and leaves the journal once the
holder confirms it took it. A daemon that re-attaches sends again what the journal still holds
(and the answers stored for that claude's requests): the holder takes each key once, so a
line that was in flight when a daemon died reaches claude, and one that had arrived is not
written twice.

Signals go to claude's process group directly (pgid = claude's pid), as for a direct child.
A holder that goes away without reporting claude's exit is a crash of claude: what is left of
claude's group is killed, so no second claude ever works on the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from betcode.claude.holder import holder as holder_script
from betcode.claude.process import (
    ClaudeStartError,
    ClaudeStdinClosed,
    ProcessGroupLeader,
    StderrTail,
    require_workdir,
)
from betcode.protocol.framing import DEFAULT_MAX_PAYLOAD_BYTES, Line, LineFramer
from betcode.protocol.writer import answered_request_id
from betcode.spawn import DEVNULL, PIPE, spawn

logger = logging.getLogger(__name__)

DEFAULT_SPOOL_LIMIT_BYTES = 64 * 1024 * 1024
DEFAULT_UNATTENDED_SECONDS = 7 * 86400.0
DEFAULT_KILL_GRACE_SECONDS = 5.0
READY_TIMEOUT_SECONDS = 30.0
MAX_SOCKET_PATH_BYTES = 107  # sun_path holds 108 bytes with its terminating NUL
# The holder stops reading claude at its bound of unacknowledged bytes. Told of commits in steps
# of a sixteenth of that bound, it still spools 15/16 of it ahead of what is committed.
ACK_STEPS_PER_SPOOL = 16
HOLDER_LOST = "the holder of claude pid {pid} went away without its exit status; claude killed"


@dataclass(frozen=True, slots=True)
class StdoutMark:
    """Where each line of a batch ends in claude's stdout, and whom to tell once committed."""

    holder_id: str
    ends: Sequence[int]
    acknowledge: Callable[[int], None]


HeldLinesCallback = Callable[[list[Line], StdoutMark], None]


class StdinJournal(Protocol):
    """Where the lines for claude's stdin wait until its holder took them (the session's)."""

    async def keep(self, holder_id: str, key: str, line: bytes) -> None:
        """Committed once this returns: if the daemon dies now, the next one sends the line."""

    def taken(self, holder_id: str, key: str) -> None:
        """The holder has the line: forget it (need not be committed at once)."""

    def ended(self, holder_id: str) -> None:
        """claude has exited: what it did not take it never will."""


StdinLine = tuple[str, bytes]  # (key, line), for a holder that may not have taken it


@dataclass(frozen=True, slots=True)
class HolderPlace:
    """Where holders live (`<data dir>/holders`), their spool bound, how long a holder keeps
    claude running with no daemon attached (0: for ever), and the grace from SIGTERM to SIGKILL
    when it then ends claude."""

    root: Path
    spool_limit_bytes: int = DEFAULT_SPOOL_LIMIT_BYTES
    unattended_seconds: float = DEFAULT_UNATTENDED_SECONDS
    kill_grace_seconds: float = DEFAULT_KILL_GRACE_SECONDS


@dataclass(slots=True)
class HolderLink:
    """An open connection to a holder, after its HELLO."""

    holder_id: str
    holder_pid: int
    claude_pid: int
    claude_exited: bool  # claude exited before this connection: while no daemon was attached
    spool_limit_bytes: int  # the holder's own bound (a daemon's setting may have changed since)
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class IncompatibleHolder(OSError):
    """A holder that speaks another protocol version (left by an older daemon)."""


def stdin_key(line: bytes) -> str:
    """The key the holder takes `line` under: an answer is keyed by the request it answers (an
    answer sent again after a restart is then recognised, whoever sends it); any other line by
    a key of its own."""
    request_id = answered_request_id(line)
    if request_id is None:
        return secrets.token_hex(16)
    return "answer-" + hashlib.blake2b(request_id.encode(), digest_size=16).hexdigest()


async def connect(directory: Path, patience: float = 5.0) -> HolderLink:
    """Connect to the holder in `directory` and read its HELLO (OSError/TimeoutError if none,
    IncompatibleHolder if it speaks another protocol)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_unix_connection(str(directory / "sock")), patience
    )
    try:
        hello = (await asyncio.wait_for(reader.readline(), patience)).decode().split()
        if hello[:1] != ["HELLO"]:
            raise ValueError(hello)
    except (ValueError, TimeoutError, OSError) as error:
        writer.close()
        raise OSError(f"holder in {directory} did not greet: {error}") from error
    if len(hello) != 6 or hello[1] != str(holder_script.PROTOCOL):
        writer.close()
        raise IncompatibleHolder(f"holder in {directory} speaks another protocol: {hello}")
    _, _, holder_pid, claude_pid, claude_state, limit = hello
    return HolderLink(
        directory.name,
        int(holder_pid),
        int(claude_pid),
        claude_state == "exited",
        int(limit),
        reader,
        writer,
    )


async def replay(directory: Path, place: HolderPlace) -> HolderLink:
    """Serve what a holder left when it ended its unattended claude (holder.py --replay)."""
    await _launch(["--replay", str(directory), str(place.unattended_seconds)], directory, None)
    return await connect(directory)


async def _launch(args: Sequence[str], cwd: Path, env: Mapping[str, str] | None) -> int:
    """Start holder.py with `args` in a session of its own; claude's pid from its READY."""
    argv = [sys.executable, "-I", "-S", holder_script.__file__, *args]
    child = await spawn(argv, stdout=PIPE, stderr=DEVNULL, cwd=cwd, env=env)
    assert child.stdout is not None
    try:
        ready = await asyncio.wait_for(child.stdout.readline(), READY_TIMEOUT_SECONDS)
    except TimeoutError:
        ready = b"ERROR the holder did not start in time"
    finally:
        child.close()
    kind, _, detail = ready.decode(errors="replace").strip().partition(" ")
    if kind != "READY":
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        raise ClaudeStartError(detail or "no answer")
    return int(detail)


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class HeldClaude(ProcessGroupLeader):
    """A claude under a holder: started by `start`, or found alive by `adopt` after a
    restart. `on_lines` is called on the loop with each batch of stdout lines. Without a
    `journal`, stdin lines are sent but not kept (lost if the daemon dies with them)."""

    def __init__(
        self,
        on_lines: HeldLinesCallback,
        place: HolderPlace,
        session_id: str,
        *,
        max_line_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        journal: StdinJournal | None = None,
    ) -> None:
        self._on_lines = on_lines
        self._place = place
        self._session_id = session_id
        self._journal = journal
        self._framer = LineFramer(max_line_bytes)
        self._link: HolderLink | None = None
        self._received = 0  # the offset in claude's stdout of the next byte from the holder
        self._committed = 0
        self._told = 0  # the committed offset the holder was last told
        self._ack_step = 1
        self._last_line_end = 0
        self._end: int | None = None  # claude's whole stdout, once it exited
        self._exited: asyncio.Future[int] | None = None
        self._finished: asyncio.Task[int] | None = None
        self._stderr_tail = StderrTail(lambda: self.pid)
        self._stdin_closed = False
        self.last_output_at = time.monotonic()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], *, worktree: bool = False
    ) -> None:
        """As ClaudeProcess.start, through a new holder (in a folder of its own)."""
        if self._link is not None:
            raise RuntimeError("a HeldClaude is started once")
        await require_workdir(cwd, worktree=worktree)
        directory = await asyncio.to_thread(self._new_directory)
        place = self._place
        limits = (place.spool_limit_bytes, place.unattended_seconds, place.kill_grace_seconds)
        args = [*map(str, limits), self._session_id]
        try:
            claude_pid = await _launch([str(directory), *args, "--", *argv], cwd, env)
        except (OSError, ClaudeStartError) as error:
            await asyncio.to_thread(shutil.rmtree, directory, True)
            raise ClaudeStartError(f"cannot start claude ({argv[0]}): {error}") from error
        try:
            link = await connect(directory)
        except (OSError, TimeoutError) as error:
            kill_group(claude_pid)
            raise ClaudeStartError(f"cannot reach claude's holder: {error}") from error
        self._begin(link, 0, ())

    def _new_directory(self) -> Path:
        self._place.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory = self._place.root / secrets.token_hex(4)
        if len(os.fsencode(directory / "sock")) > MAX_SOCKET_PATH_BYTES:
            raise ClaudeStartError(
                f"the data dir path is too long for a holder's socket ({directory}/sock is "
                f"over {MAX_SOCKET_PATH_BYTES} bytes); use a shorter BETCODE_DATA_DIR"
            )
        directory.mkdir(mode=0o700)
        return directory

    def adopt(self, link: HolderLink, offset: int, resend: Iterable[StdinLine] = ()) -> None:
        """Take over a holder found alive at startup; `offset` is what was committed of it,
        `resend` the stdin lines the holder may not have taken (it drops those it has)."""
        self._begin(link, offset, resend)

    def _begin(self, link: HolderLink, offset: int, resend: Iterable[StdinLine]) -> None:
        self._link = link
        self._received = self._committed = self._told = self._last_line_end = offset
        self._ack_step = max(1, link.spool_limit_bytes // ACK_STEPS_PER_SPOOL)
        self._exited = asyncio.get_running_loop().create_future()
        link.writer.write(f"ATTACH {offset}\n".encode())
        for key, line in resend:
            link.writer.write(f"IN {len(line)} {key}\n".encode() + line)
        self.last_output_at = time.monotonic()
        self._finished = asyncio.create_task(self._pump(link), name=f"claude-{self.pid}-holder")

    def detach(self) -> None:
        """Let go of the holder and leave claude running (the daemon stops keeping sessions)."""
        if self._finished is not None:
            self._finished.cancel()
        if self._link is not None:
            self._link.writer.close()

    @property
    def holder_id(self) -> str:
        return self._require_link().holder_id

    @property
    def holder_pid(self) -> int:
        return self._require_link().holder_pid

    @property
    def exited_unwatched(self) -> bool:
        """claude had exited before this daemon attached (no supervisor saw it run)."""
        return self._require_link().claude_exited

    def _require_link(self) -> HolderLink:
        if self._link is None:
            raise RuntimeError("claude was not started")
        return self._link

    # -- what the holder sends --------------------------------------------------------------
    async def _pump(self, link: HolderLink) -> int:
        reader = link.reader
        try:
            while header := await reader.readline():
                kind, *args = header.decode().split()
                if kind == "OUT":
                    offset, size = int(args[0]), int(args[1])
                    data = await reader.readexactly(size)
                    if offset != self._received:
                        raise ValueError(f"output at {offset}, expected {self._received}")
                    self._stdout(data)
                elif kind == "ERR":
                    self._stderr_tail.feed(await reader.readexactly(int(args[0])))
                elif kind == "TOOK":
                    if self._journal is not None:
                        self._journal.taken(link.holder_id, args[0])
                elif kind == "EXIT":
                    return self._exit(int(args[0]), int(args[1]))
                else:
                    raise ValueError(f"unknown frame {header!r}")
        except (OSError, ValueError, asyncio.IncompleteReadError) as error:
            logger.warning("claude pid %d: the link to its holder broke: %s", self.pid, error)
        # No EXIT: the holder died (or broke the protocol). claude must not outlive it (one
        # that had exited before is no longer ours to signal: its pid may be another's).
        if not link.claude_exited:
            kill_group(self.pid)
        self._stderr_tail.add(HOLDER_LOST.format(pid=self.pid))
        logger.error(HOLDER_LOST.format(pid=self.pid))
        return self._exit(-signal.SIGKILL, None)

    def _stdout(self, data: bytes) -> None:
        self.last_output_at = time.monotonic()
        start = self._received
        self._received += len(data)
        lines: list[Line] = []
        ends: list[int] = []
        feed = self._framer.feed
        position = 0
        # Line by line, to know where each ends (the offset a restart continues from).
        while (newline := data.find(b"\n", position)) >= 0:
            for line in feed(data[position : newline + 1]):
                lines.append(line)
                ends.append(start + newline + 1)
            position = newline + 1
        if position < len(data):
            feed(data[position:])
        self._deliver(lines, ends)

    def _deliver(self, lines: list[Line], ends: list[int]) -> None:
        if not lines:
            return
        self._last_line_end = ends[-1]
        mark = StdoutMark(self.holder_id, ends, self._acknowledge)
        try:
            self._on_lines(lines, mark)
        except Exception:
            logger.exception("claude pid %d: the line consumer failed", self.pid)

    def _exit(self, returncode: int, end: int | None) -> int:
        final = self._framer.finish()
        if end is not None:
            self._end = end
            self._deliver(final, [end] * len(final))
        self._stderr_tail.finish()
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(returncode)
        if self._journal is not None:
            self._journal.ended(self.holder_id)
        self._acknowledge(self._committed)  # nothing more to commit: tell the holder now
        return returncode

    def _acknowledge(self, offset: int) -> None:
        """Called once the lines up to `offset` are committed; the holder may forget them.
        After claude's exit, the end of its output is acknowledged with its last line (bytes
        after it are blank lines, stored as nothing), and the holder then exits."""
        self._committed = max(self._committed, offset)
        if self._end is not None and self._committed >= self._last_line_end:
            self._committed = self._end
        # Once claude exited, any progress is told: the holder waits for its end to exit.
        step = self._ack_step if self._end is None else 1
        if self._committed - self._told < step:
            return
        self._told = self._committed
        self._send(f"ACK {self._committed}\n".encode())

    def _send(self, frame: bytes) -> None:
        link = self._link
        if link is not None and not link.writer.is_closing():
            link.writer.write(frame)

    # -- the ClaudeProcess interface ----------------------------------------------------------
    async def wait(self) -> int:
        """The exit status, once claude exited and everything it printed was delivered."""
        if self._finished is None:
            raise RuntimeError("claude was not started")
        return await asyncio.shield(self._finished)

    async def exited_within(self, seconds: float) -> bool:
        if self._exited is None:
            raise RuntimeError("claude was not started")
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), seconds)
        except TimeoutError:
            return False
        return True

    def _signal_group(self, signum: signal.Signals) -> None:
        if not self._require_link().claude_exited:  # else its pid may be another's by now
            super()._signal_group(signum)

    @property
    def pid(self) -> int:
        """claude's pid (its process group), not the holder's."""
        return self._require_link().claude_pid

    @property
    def returncode(self) -> int | None:
        exited = self._exited
        return exited.result() if exited is not None and exited.done() else None

    @property
    def stderr_tail(self) -> list[str]:
        return list(self._stderr_tail.lines)

    async def write(self, data: bytes) -> None:
        """Complete NDJSON lines for claude's stdin, through the holder: kept in the journal
        first (committed), then sent."""
        if not data.endswith(b"\n"):
            raise ValueError("claude stdin takes complete lines: data must end with a newline")
        link = self._require_link()
        self._require_open(link)
        key = stdin_key(data)
        if self._journal is not None:
            await self._journal.keep(link.holder_id, key, data)
            self._require_open(link)  # claude may have exited meanwhile
        try:
            link.writer.write(f"IN {len(data)} {key}\n".encode() + data)
            await link.writer.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise ClaudeStdinClosed(f"claude pid {self.pid}'s holder went away: {error}") from error

    def _require_open(self, link: HolderLink) -> None:
        if self._stdin_closed or self.returncode is not None or link.writer.is_closing():
            raise ClaudeStdinClosed(f"claude pid {self.pid} no longer accepts input")

    def close_stdin(self) -> None:
        self._stdin_closed = True
        self._send(b"EOF\n")
