"""The holder: a tiny process that owns one claude's pipes so claude outlives the daemon.

Run as ``python -I -S holder.py DIR SPOOL_LIMIT UNATTENDED GRACE SESSION_ID -- CLAUDE...``, it
imports the standard library only: it starts in milliseconds and its code is all here.

* It starts claude in a process group of its own (pgid = claude's pid: the daemon signals that
  group for stop, cancel and the watchdog) and prints ``READY <claude pid>`` (or ``ERROR ...``)
  on its stdout, which it then closes.
* claude's group dies with the holder: a guard (a forked copy of the holder that does nothing
  but read a pipe only the holder writes) kills it when the pipe ends without a word, which is
  how a holder killed with SIGKILL ends it. A claude waiting on a permission does not exit on
  stdin EOF, and the tools it started would live on too: nobody would ever end them. Once
  claude has exited the holder tells the guard so, and the guard leaves without killing.
* Every byte claude prints on stdout is appended to the spool (segment files in DIR/spool,
  named by their first byte's offset in claude's stdout) and, while a daemon is attached, sent
  to it. The daemon acknowledges the offset it has committed; fully acknowledged segments are
  deleted. At the bound (SPOOL_LIMIT unacknowledged bytes) the holder stops reading claude's
  stdout until an acknowledgement makes room: the pipe fills and claude waits in its write.
  Nothing is dropped; on disk the spool stays under SPOOL_LIMIT + one segment + one read.
* Each line for claude's stdin comes with a key and is taken once per key: a daemon that
  re-attached after a restart sends again what its predecessor may not have handed over, and
  what was taken already is dropped. A taken line is confirmed (``TOOK``) and written to claude
  by a thread of its own, in order: the thread that reads the daemon's requests never waits for
  claude, so a claude that stops reading holds up neither acknowledgements nor a daemon's attach.
* One daemon at a time is attached over DIR/sock (0600). Frames are a text header line,
  optionally followed by a payload of the length it names:
    holder → daemon: ``HELLO <protocol> <holder pid> <claude pid> running|exited <spool limit>``,
                     ``OUT <offset> <n>`` + bytes, ``ERR <n>`` + bytes (claude's stderr),
                     ``EXIT <returncode> <end offset>``, ``TOOK <key>``
    daemon → holder: ``ATTACH <offset>`` (send the spool from there on, then live),
                     ``ACK <offset>``, ``IN <n> <key>`` + bytes (claude's stdin), ``EOF`` (close it)
* When claude has exited, its output is read to the end (or for DRAIN_SECONDS), what is left
  of its group is killed, and ``EXIT`` is sent after the last ``OUT``. Once the daemon has
  acknowledged the end offset the holder removes DIR and exits.
* After UNATTENDED seconds without a daemon (0: never), the holder ends claude (SIGTERM to its
  group, SIGKILL GRACE seconds later) unless it has exited, writes its exit status (and stderr
  tail) to DIR/exit.json and exits, leaving the spool: no process waits for ever for a daemon
  that may never come. The next daemon runs ``holder.py --replay DIR UNATTENDED``, which serves
  them as a holder whose claude exited meanwhile would.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import IO, Any, NoReturn

PROTOCOL = 2  # in HELLO: a daemon refuses a holder that speaks another version
# A pipe holds 64 KiB, so no read of claude's pipes returns more. Asking for more costs: CPython
# allocates the whole size before reading, and above glibc's 128 KiB mmap threshold that is an
# mmap, an mremap down to the bytes read and an munmap for every read (measured: 33 against 9 µs
# of CPU per read of one line).
PIPE_READ_BYTES = 64 * 1024
SPOOL_READ_BYTES = 256 * 1024  # per OUT frame when a daemon attaches behind the live output
SEGMENT_BYTES = 4 * 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024  # claude's stderr kept while no daemon is attached
DRAIN_SECONDS = 2.0
MAX_HEADER_BYTES = 128
CHUNK_FROM_DAEMON_BYTES = 64 * 1024
EXIT_RECORD = "exit.json"


class Spool:
    """claude's stdout from the oldest unacknowledged segment on, on disk."""

    def __init__(self, directory: str, limit: int, segments: list[int], end: int) -> None:
        self.directory = directory
        self.limit = limit
        # Deleted only whole, so the spool holds at most limit + a segment + one read on disk.
        self.segment_bytes = max(64 * 1024, min(SEGMENT_BYTES, limit // 4))
        self.end = end  # bytes of stdout received from claude
        self.acked = segments[0] if segments else end  # bytes the daemon has committed
        self._segments = segments  # first offsets, oldest first
        self._out: int | None = None  # fd of the newest segment

    @classmethod
    def new(cls, directory: str, limit: int) -> Spool:
        os.makedirs(directory, mode=0o700)
        return cls(directory, limit, [], 0)

    @classmethod
    def left(cls, directory: str, limit: int, end: int) -> Spool:
        """The spool a holder left with claude's output up to `end` (exit.json says so)."""
        segments = sorted(int(name) for name in os.listdir(directory))
        if segments:
            last = segments[-1]
            if last + os.path.getsize(os.path.join(directory, f"{last:020d}")) != end:
                raise OSError(f"the spool in {directory} does not end at byte {end}")
        return cls(directory, limit, segments, end)

    def _path(self, start: int) -> str:
        return os.path.join(self.directory, f"{start:020d}")

    @property
    def full(self) -> bool:
        return self.end - self.acked >= self.limit

    def append(self, data: bytes) -> None:
        if self._out is None or self.end - self._segments[-1] >= self.segment_bytes:
            if self._out is not None:
                os.close(self._out)
            self._segments.append(self.end)
            self._out = os.open(self._path(self.end), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(self._out, view) :]
        self.end += len(data)

    def ack(self, offset: int) -> None:
        self.acked = max(self.acked, min(offset, self.end))
        while len(self._segments) > 1 and self._segments[1] <= self.acked:
            os.unlink(self._path(self._segments.pop(0)))

    def read_from(self, offset: int) -> Iterator[bytes]:
        """The bytes from `offset` to the end, in chunks (offset ≥ acked, so they are here)."""
        bounds = [*self._segments[1:], self.end]
        for start, stop in zip(self._segments, bounds, strict=False):
            if stop <= offset:
                continue
            with open(self._path(start), "rb") as segment:
                segment.seek(max(0, offset - start))
                left = stop - max(offset, start)
                while left > 0:
                    chunk = segment.read(min(SPOOL_READ_BYTES, left))
                    if not chunk:
                        raise OSError(f"spool segment {start} is shorter than recorded")
                    left -= len(chunk)
                    yield chunk


class StdinLines:
    """The daemon's lines for claude's stdin: each key taken once, written in order by `pump`
    (a thread of its own). Keys are kept for claude's life: a few bytes per line."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self._pipe = pipe
        self._ready = threading.Condition()
        self._queue: deque[bytes | None] = deque()  # None: close claude's stdin
        self._taken: set[str] = set()
        self._open = pipe is not None

    def take(self, key: str, data: bytes) -> None:
        with self._ready:
            if key in self._taken:
                log(f"stdin line {key} was taken before; dropped")
                return
            self._taken.add(key)
            # A claude whose stdin is closed has exited or is exiting: its EXIT tells the daemon.
            if self._open:
                self._queue.append(data)
                self._ready.notify()

    def close(self) -> None:
        with self._ready:
            if self._open:
                self._open = False
                self._queue.append(None)
                self._ready.notify()

    def pump(self) -> None:
        pipe = self._pipe
        assert pipe is not None
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._queue))
                data = self._queue.popleft()
            if data is None:
                break
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(pipe.fileno(), view) :]
            except OSError as error:
                log(f"claude's stdin is closed ({error}); what is left for it is dropped")
                break
        with self._ready:
            self._open = False
            self._queue.clear()
        with contextlib.suppress(OSError):
            pipe.close()


class Holder:
    def __init__(
        self,
        directory: str,
        spool: Spool,
        claude_pid: int,
        unattended: float,
        kill_grace: float = 0.0,
    ) -> None:
        self.directory = directory
        self.spool = spool
        self.claude_pid = claude_pid
        self.unattended = unattended
        self.kill_grace = kill_grace  # from SIGTERM to SIGKILL when claude is ended unattended
        self.claude: subprocess.Popen[bytes] | None = None  # None: replaying an ended claude
        self.guard: Guard | None = None
        self.stdin = StdinLines(None)
        self.state = threading.Condition()
        self.conn: socket.socket | None = None
        self.stderr_kept = bytearray()
        self.stdout_done = False
        self.returncode: int | None = None  # set once claude exited and its output is read
        self.leaving = False  # no daemon came in time: claude is ended, then the holder leaves

    def run(self, claude: subprocess.Popen[bytes], guard: Guard) -> None:
        """Take claude's pipes, each on a thread of its own."""
        assert claude.stdout is not None
        assert claude.stderr is not None
        self.claude = claude
        self.guard = guard
        self.stdin = StdinLines(claude.stdin)
        for target, args in (
            (self.pump_stdout, (claude.stdout,)),
            (self.pump_stderr, (claude.stderr,)),
            (self.watch_exit, (claude,)),
            (self.stdin.pump, ()),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()

    # -- claude → spool → daemon ----------------------------------------------------------
    def pump_stdout(self, pipe: IO[bytes]) -> None:
        while True:
            with self.state:
                if self.spool.full:
                    log(f"spool full ({self.spool.end - self.spool.acked} bytes unacknowledged)")
                self.state.wait_for(
                    lambda: not self.spool.full or self.returncode is not None or self.leaving
                )
            chunk = os.read(pipe.fileno(), PIPE_READ_BYTES)
            with self.state:
                if self.returncode is not None:
                    return  # exit already reported: later output came from an escaped process
                if not chunk:
                    self.stdout_done = True
                    self.state.notify_all()
                    return
                offset = self.spool.end
                self.spool.append(chunk)
                self._send(f"OUT {offset} {len(chunk)}\n".encode(), chunk)

    def pump_stderr(self, pipe: IO[bytes]) -> None:
        while chunk := os.read(pipe.fileno(), PIPE_READ_BYTES):
            with self.state:
                if self.conn is None:
                    self.stderr_kept += chunk
                    del self.stderr_kept[:-STDERR_KEEP_BYTES]
                else:
                    self._send(f"ERR {len(chunk)}\n".encode(), chunk)

    def watch_exit(self, claude: subprocess.Popen[bytes]) -> None:
        returncode = claude.wait()
        with self.state:
            self._drain()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.claude_pid, signal.SIGKILL)  # what is left of its group
        if self.guard is not None:
            self.guard.dismiss()
        with self.state:
            self.returncode = returncode
            self.state.notify_all()
            log(f"claude exited ({returncode}) after {self.spool.end} bytes of output")
            self._send(f"EXIT {returncode} {self.spool.end}\n".encode())
            self._finish_if_done()
            if self.leaving and self.conn is None:
                self._leave()

    def _drain(self) -> None:
        """Under the lock: wait for the end of claude's stdout. Only time spent reading counts
        towards DRAIN_SECONDS (a process outside the group may hold the pipe open forever);
        a full spool waits for the daemon, so output is never cut off at the bound (unless
        the holder is leaving: then claude's group is dead and its pipe holds what is left)."""
        deadline = None
        while not self.stdout_done:
            if self.spool.full and not self.leaving:
                deadline = None
                self.state.wait()
                continue
            if deadline is None:
                deadline = time.monotonic() + DRAIN_SECONDS
            left = deadline - time.monotonic()
            if left <= 0:
                log("claude exited but its stdout stays open; no longer reading it")
                return
            self.state.wait(left)

    def _send(self, header: bytes, payload: bytes = b"") -> None:
        """Under the lock: to the attached daemon, if any; a broken connection detaches it."""
        if self.conn is None:
            return
        try:
            self.conn.sendall(header + payload)
        except OSError:
            self._detach()

    def _detach(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _finish_if_done(self) -> None:
        """Under the lock: claude exited and the daemon committed all it printed: leave."""
        if self.returncode is not None and self.spool.acked >= self.spool.end:
            log("everything acknowledged; holder exits")
            shutil.rmtree(self.directory, ignore_errors=True)
            os._exit(0)

    # -- no daemon for too long -------------------------------------------------------------
    def _unattended(self) -> None:
        """No daemon attached for the unattended limit: leave at once if claude has exited
        (its output and status wait for the next daemon); else end claude (SIGTERM lets the
        CLI save its session and stop its tools) and leave once it exited (watch_exit, or the
        next timeout if a daemon came and went meanwhile)."""
        with self.state:
            if self.returncode is not None:
                self._leave()
            if self.leaving:
                return  # claude was ended and has not exited yet: SIGKILL follows the grace
            log(f"no daemon attached for {self.unattended:g} s: ending claude")
            self.leaving = True
            self.state.notify_all()  # its output is read on, past the bound, to its end
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.claude_pid, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, daemon=True).start()

    def _kill_after_grace(self) -> None:
        time.sleep(self.kill_grace)
        assert self.claude is not None
        if self.claude.returncode is None:
            log(f"claude ignored SIGTERM for {self.kill_grace:g} s; sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.claude_pid, signal.SIGKILL)

    def _leave(self) -> None:
        """Under the lock, claude ended and no daemon attached: keep its exit status beside the
        spool for the next daemon (`--replay`) and exit. exit.json is written while the socket
        still answers, so a daemon that finds the holder gone finds the record too."""
        record = {
            "returncode": self.returncode,
            "end": self.spool.end,
            "limit": self.spool.limit,
            "stderr": self.stderr_kept.decode(errors="replace"),  # why it ended, maybe
        }
        path = os.path.join(self.directory, EXIT_RECORD)
        with open(path + ".tmp", "w", encoding="utf-8") as file:
            json.dump(record, file)
        os.replace(path + ".tmp", path)
        log(f"leaving {self.spool.end - self.spool.acked} bytes of output for the next daemon")
        os._exit(0)

    # -- daemon → holder (the main thread) --------------------------------------------------
    def serve(self, listener: socket.socket) -> None:
        while True:
            conn = self._accept(listener)
            try:
                self._serve_one(conn)
            except (OSError, ValueError) as error:
                log(f"daemon connection ended: {error}")
            with self.state:
                if self.conn is conn:
                    self._detach()
                else:
                    conn.close()

    def _accept(self, listener: socket.socket) -> socket.socket:
        """The next daemon; each time none comes within the unattended limit (0: no limit),
        see `_unattended`."""
        listener.settimeout(self.unattended or None)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                self._unattended()
                continue
            conn.setblocking(True)
            return conn

    def _serve_one(self, conn: socket.socket) -> None:
        with self.state:
            state = "running" if self.returncode is None else "exited"
        hello = f"HELLO {PROTOCOL} {os.getpid()} {self.claude_pid} {state} {self.spool.limit}\n"
        conn.sendall(hello.encode())
        stream = Requests(conn)
        while header := stream.readline():
            kind, *args = header.decode().split()
            if kind == "ATTACH":
                self._attach(conn, int(args[0]))
            elif kind == "ACK":
                with self.state:
                    self.spool.ack(int(args[0]))
                    self.state.notify_all()
                    self._finish_if_done()
            elif kind == "IN":
                key = args[1]
                self.stdin.take(key, stream.read_exactly(int(args[0])))
                with self.state:
                    if self.conn is conn:
                        self._send(f"TOOK {key}\n".encode())
            elif kind == "EOF":
                self.stdin.close()
            else:
                raise ValueError(f"unknown request {header!r}")

    def _attach(self, conn: socket.socket, offset: int) -> None:
        with self.state:
            if not self.spool.acked <= offset <= self.spool.end:
                raise ValueError(
                    f"attach at {offset}: this holder has bytes "
                    f"{self.spool.acked}-{self.spool.end} of claude's output"
                )
            self._detach()
            self.conn = conn
            self.spool.ack(offset)
            for chunk in self.spool.read_from(offset):
                self._send(f"OUT {offset} {len(chunk)}\n".encode(), chunk)
                offset += len(chunk)
            if self.stderr_kept:
                self._send(f"ERR {len(self.stderr_kept)}\n".encode(), bytes(self.stderr_kept))
                self.stderr_kept.clear()
            if self.returncode is not None:
                self._send(f"EXIT {self.returncode} {self.spool.end}\n".encode())
            self.state.notify_all()
            self._finish_if_done()


class Guard:
    """Kills claude's process group once the holder is gone, however it went (see above)."""

    def __init__(self, claude_pid: int) -> None:
        read_end, self._write_end = os.pipe()
        self.pid = os.fork()  # before the holder's threads start: only this thread is copied
        if self.pid == 0:
            _guard(read_end, claude_pid)
        os.close(read_end)

    def dismiss(self) -> None:
        """claude has exited and its group is dealt with: the guard leaves, killing nothing
        (the group's id may soon be another's)."""
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"x")
            os.close(self._write_end)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _guard(read_end: int, claude_pid: int) -> NoReturn:
    """The guard's whole life, in the forked child: it keeps no other descriptor of the
    holder's (a socket or pipe held here would keep the daemon or claude waiting on it)."""
    try:
        os.dup2(read_end, 0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the log on 2 stays
        if not os.read(0, 1):
            log(f"the holder is gone; killing claude's process group {claude_pid}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(claude_pid, signal.SIGKILL)
    finally:
        os._exit(0)


class Requests:
    """What the daemon sends on `conn`, read by the main thread, buffered (a header is one recv,
    not one per byte). It waits in poll() for input, never in recv(): the kernel wakes every
    thread blocked in recv() on this socket each time the daemon has read what pump_stdout sent
    (the socket has room again), which cost a wake-up and a context switch per line of claude's;
    poll() is woken for input only."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._input = select.poll()
        self._input.register(conn, select.POLLIN)
        self._buffer = bytearray()

    def readline(self) -> bytes:
        """The next header line, with its newline; b"" once the daemon closed the connection."""
        while (newline := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) >= MAX_HEADER_BYTES:
                raise ValueError(f"no request header in {bytes(self._buffer)!r}")
            if not self._receive():
                return b""
        return self._take(newline + 1)

    def read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._receive():
                raise ValueError("the daemon went away in the middle of a frame")
        return self._take(size)

    def _receive(self) -> bool:
        self._input.poll()
        chunk = self._conn.recv(CHUNK_FROM_DAEMON_BYTES)
        self._buffer += chunk
        return bool(chunk)

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} holder {os.getpid()}: {message}", file=sys.stderr, flush=True)


def _log_to_file(directory: str) -> None:
    """Our own diagnostics go to a file of our own; claude's pipes are ours alone."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND  # a replay adds to the log it finds
    log_fd = os.open(os.path.join(directory, "holder.log"), flags, 0o600)
    os.dup2(log_fd, 2)
    os.close(log_fd)


def _listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # the socket is 0600 from its creation on
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(4)
    return listener


def _ready(claude_pid: int) -> None:
    print(f"READY {claude_pid}", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the daemon reads our stdout to its end: close it
    os.close(devnull)


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as file:
        facts = json.load(file)
    if not isinstance(facts, dict):
        raise ValueError(f"{path} does not hold an object")
    return facts


def run(argv: list[str]) -> int:
    directory, limit, unattended, grace, session_id, separator, *claude_argv = argv
    if separator != "--" or not claude_argv:
        print("ERROR usage: holder.py DIR SPOOL_LIMIT UNATTENDED GRACE SESSION_ID -- CLAUDE...")
        return 2
    _log_to_file(directory)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    claude: subprocess.Popen[bytes] | None = None
    try:
        listener = _listen(os.path.join(directory, "sock"))
        spool = Spool.new(os.path.join(directory, "spool"), int(limit))
        claude = subprocess.Popen(
            claude_argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        guard = Guard(claude.pid)
    except OSError as error:
        if claude is not None:  # unguarded, it could outlive this holder: not started at all
            os.killpg(claude.pid, signal.SIGKILL)
            claude.wait()
        print(f"ERROR {error}", flush=True)
        shutil.rmtree(directory, ignore_errors=True)
        return 1
    holder = Holder(directory, spool, claude.pid, float(unattended), float(grace))
    facts = {
        "session_id": session_id,
        "holder_pid": os.getpid(),
        "claude_pid": claude.pid,
        "started_at": time.time(),
    }
    with open(os.path.join(directory, "holder.json"), "w", encoding="utf-8") as file:
        json.dump(facts, file)
    log(f"claude pid {claude.pid} started: {claude_argv[0]}")
    holder.run(claude, guard)
    _ready(claude.pid)
    holder.serve(listener)
    return 0


def replay(argv: list[str]) -> int:
    """Serve what a holder that ended its unattended claude left in DIR (the spool, exit.json)."""
    directory, unattended = argv
    _log_to_file(directory)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        facts = _read_json(os.path.join(directory, "holder.json"))
        record = _read_json(os.path.join(directory, EXIT_RECORD))
        spool_dir = os.path.join(directory, "spool")
        spool = Spool.left(spool_dir, int(record["limit"]), int(record["end"]))
        socket_path = os.path.join(directory, "sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)  # left by the holder that ended claude
        listener = _listen(socket_path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"ERROR {error}", flush=True)
        return 1
    holder = Holder(directory, spool, int(facts["claude_pid"]), float(unattended))
    holder.returncode = int(record["returncode"])
    holder.stdout_done = True
    holder.stderr_kept += str(record.get("stderr", "")).encode()
    log(f"replaying bytes {spool.acked}-{spool.end} of an ended claude's output")
    _ready(holder.claude_pid)
    holder.serve(listener)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--replay"]:
        return replay(argv[1:])
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
