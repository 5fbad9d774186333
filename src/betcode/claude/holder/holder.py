"""The holder: a tiny process that owns one claude's pipes so claude outlives the daemon.

Run as a script (``python -I -S holder.py DIR SPOOL_LIMIT SESSION_ID -- CLAUDE_ARGV...``), it
imports the standard library only: it starts in milliseconds and its code is all here.

* It starts claude in a process group of its own (pgid = claude's pid: the daemon signals that
  group for stop, cancel and the watchdog) and prints ``READY <claude pid>`` (or ``ERROR ...``)
  on its stdout, which it then closes.
* Every byte claude prints on stdout is appended to the spool (segment files in DIR/spool,
  named by their first byte's offset in claude's stdout) and, while a daemon is attached, sent
  to it. The daemon acknowledges the offset it has committed; fully acknowledged segments are
  deleted. At the bound (SPOOL_LIMIT unacknowledged bytes) the holder stops reading claude's
  stdout until an acknowledgement makes room: the pipe fills and claude waits in its write.
  Nothing is dropped; on disk the spool stays under SPOOL_LIMIT + one segment + one read.
* One daemon at a time is attached over DIR/sock (0600). Frames are a text header line,
  optionally followed by a payload of the length it names:
    holder → daemon: ``HELLO <holder pid> <claude pid> running|exited``,
                     ``OUT <offset> <n>`` + bytes, ``ERR <n>`` + bytes (claude's stderr),
                     ``EXIT <returncode> <end offset>``
    daemon → holder: ``ATTACH <offset>`` (send the spool from there on, then live),
                     ``ACK <offset>``, ``IN <n>`` + bytes (claude's stdin), ``EOF`` (close it)
* When claude has exited, its output is read to the end (or for DRAIN_SECONDS), what is left
  of its group is killed, and ``EXIT`` is sent after the last ``OUT``. Once the daemon has
  acknowledged the end offset the holder removes DIR and exits. Until then it waits for a
  daemon, however long that takes.
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
from collections.abc import Iterator

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


class Spool:
    """claude's stdout from the oldest unacknowledged segment on, on disk."""

    def __init__(self, directory: str, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        # Deleted only whole, so the spool holds at most limit + a segment + one read on disk.
        self.segment_bytes = max(64 * 1024, min(SEGMENT_BYTES, limit // 4))
        self.end = 0  # bytes of stdout received from claude
        self.acked = 0  # bytes the daemon has committed
        self._segments: list[int] = []  # first offsets, oldest first
        self._out: int | None = None  # fd of the newest segment
        os.makedirs(directory, mode=0o700)

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


class Holder:
    def __init__(self, directory: str, limit: int, claude: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.claude = claude
        self.spool = Spool(os.path.join(directory, "spool"), limit)
        self.state = threading.Condition()
        self.conn: socket.socket | None = None
        self.stderr_kept = bytearray()
        self.stdout_done = False
        self.returncode: int | None = None  # set once claude exited and its output is read

    # -- claude → spool → daemon (each pipe has its thread) ---------------------------------
    def pump_stdout(self) -> None:
        pipe = self.claude.stdout
        assert pipe is not None
        while True:
            with self.state:
                if self.spool.full:
                    log(f"spool full ({self.spool.end - self.spool.acked} bytes unacknowledged)")
                self.state.wait_for(lambda: not self.spool.full or self.returncode is not None)
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

    def pump_stderr(self) -> None:
        pipe = self.claude.stderr
        assert pipe is not None
        while chunk := os.read(pipe.fileno(), PIPE_READ_BYTES):
            with self.state:
                if self.conn is None:
                    self.stderr_kept += chunk
                    del self.stderr_kept[:-STDERR_KEEP_BYTES]
                else:
                    self._send(f"ERR {len(chunk)}\n".encode(), chunk)

    def watch_exit(self) -> None:
        returncode = self.claude.wait()
        with self.state:
            self._drain()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.claude.pid, signal.SIGKILL)  # what is left of its group
        with self.state:
            self.returncode = returncode
            self.state.notify_all()
            log(f"claude exited ({returncode}) after {self.spool.end} bytes of output")
            self._send(f"EXIT {returncode} {self.spool.end}\n".encode())
            self._finish_if_done()

    def _drain(self) -> None:
        """Under the lock: wait for the end of claude's stdout. Only time spent reading counts
        towards DRAIN_SECONDS (a process outside the group may hold the pipe open forever);
        a full spool waits for the daemon, so output is never cut off at the bound."""
        deadline = None
        while not self.stdout_done:
            if self.spool.full:
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

    # -- daemon → holder (the main thread) --------------------------------------------------
    def serve(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            try:
                self._serve_one(conn)
            except (OSError, ValueError) as error:
                log(f"daemon connection ended: {error}")
            with self.state:
                if self.conn is conn:
                    self._detach()
                else:
                    conn.close()

    def _serve_one(self, conn: socket.socket) -> None:
        with self.state:
            state = "running" if self.returncode is None else "exited"
        conn.sendall(f"HELLO {os.getpid()} {self.claude.pid} {state}\n".encode())
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
                self._to_claude(stream.read_exactly(int(args[0])))
            elif kind == "EOF":
                self._close_stdin()
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

    def _to_claude(self, data: bytes) -> None:
        stdin = self.claude.stdin
        # A claude that stopped reading has exited or is exiting: its EXIT tells the daemon.
        with contextlib.suppress(OSError, ValueError):
            assert stdin is not None
            stdin.write(data)
            stdin.flush()

    def _close_stdin(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.claude.stdin is not None
            self.claude.stdin.close()


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


def _listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # the socket is 0600 from its creation on
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(4)
    return listener


def main(argv: list[str]) -> int:
    directory, limit, session_id, separator, *claude_argv = argv
    if separator != "--" or not claude_argv:
        print("ERROR usage: holder.py DIR SPOOL_LIMIT SESSION_ID -- CLAUDE_ARGV...", flush=True)
        return 2
    # Our own diagnostics go to a file of our own; claude's pipes are ours alone.
    log_fd = os.open(os.path.join(directory, "holder.log"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        listener = _listen(os.path.join(directory, "sock"))
        claude = subprocess.Popen(
            claude_argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as error:
        print(f"ERROR {error}", flush=True)
        shutil.rmtree(directory, ignore_errors=True)
        return 1
    holder = Holder(directory, int(limit), claude)
    facts = {
        "session_id": session_id,
        "holder_pid": os.getpid(),
        "claude_pid": claude.pid,
        "started_at": time.time(),
    }
    with open(os.path.join(directory, "holder.json"), "w", encoding="utf-8") as file:
        json.dump(facts, file)
    log(f"claude pid {claude.pid} started: {claude_argv[0]}")
    for target in (holder.pump_stdout, holder.pump_stderr, holder.watch_exit):
        threading.Thread(target=target, daemon=True).start()
    print(f"READY {claude.pid}", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the daemon reads our stdout to its end: close it
    os.close(devnull)
    holder.serve(listener)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
