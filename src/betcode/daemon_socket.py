"""Where the daemon listens: the owner-only Unix socket (with its lock) and optional loopback TCP.

A gRPC server binding a Unix socket path silently unlinks whatever is there, including another
live daemon's socket. So before binding we take an exclusive ``flock`` on ``<socket>.lock``
(held for the daemon's lifetime; the kernel drops it when the process dies, so a crash never
leaves a stale lock), and only then clear a stale socket file.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from betcode.config.dirs import SOCKET_ENV
from betcode.lock_file import LockHeld, holder_content, take_exclusive

# sun_path holds 108 bytes on Linux, 104 on macOS/BSD, including the terminating NUL.
MAX_SOCKET_PATH_BYTES = (104 if sys.platform == "darwin" else 108) - 1


class BindError(Exception):
    """The daemon cannot listen where it was asked to; the message says what to do."""


class DaemonAlreadyRunning(BindError):
    """Another daemon serves this socket path."""


def lock_path_for(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".lock")


class SocketClaim:
    """Exclusive right to serve a Unix socket path: the held lock, and the path made ready."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd

    @property
    def target(self) -> str:
        """The gRPC address to bind."""
        return f"unix:{self.path}"

    def restrict_socket(self) -> None:
        """Owner-only access to the socket once bound (connecting needs write permission)."""
        os.chmod(self.path, 0o600)

    def release(self) -> None:
        """Removes our socket file, then drops the lock. The lock file itself stays: unlinking it
        would let a newcomer lock a fresh inode while another process still holds the old one."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        os.close(self._lock_fd)
        self._lock_fd = None


def claim_socket_path(path: Path) -> SocketClaim:
    """Locks ``<path>.lock``, creates missing directories (0700) and clears a stale socket.

    Raises ``DaemonAlreadyRunning`` if another daemon holds the lock or answers on the socket,
    and ``BindError`` for a path that is too long or occupied by something that is not a socket.
    """
    path = Path(os.path.abspath(path))
    encoded_length = len(os.fsencode(path))
    if encoded_length > MAX_SOCKET_PATH_BYTES:
        raise BindError(
            f"socket path is {encoded_length} bytes, longer than the {MAX_SOCKET_PATH_BYTES} "
            f"bytes a Unix socket address can hold: {path}. Choose a shorter path with "
            f"--socket or {SOCKET_ENV}."
        )
    _make_private_dirs(path.parent)
    lock_fd = _lock(lock_path_for(path), path)
    try:
        _clear_stale_socket(path)
    except BaseException:
        os.close(lock_fd)
        raise
    return SocketClaim(path, lock_fd)


def _make_private_dirs(directory: Path) -> None:
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):
            created.mkdir()
        # mkdir's mode is filtered by the umask; set it explicitly. Existing directories (such
        # as /tmp for a socket given with --socket) are never touched.
        os.chmod(created, 0o700)


def _lock(lock_path: Path, socket_path: Path) -> int:
    try:
        # The holder's pid, to name it in this message and for `betcode daemon status|stop`.
        return take_exclusive(lock_path, f"{os.getpid()}\n".encode())
    except LockHeld as held:
        holder = held.content.decode(errors="replace").strip() or "unknown"
        raise DaemonAlreadyRunning(
            f"another BetCode daemon (pid {holder}) is already serving {socket_path}; "
            f"stop it with `betcode daemon stop`, or start this one with a different --socket"
        ) from None


def socket_holder_pid(socket_path: Path) -> int | None:
    """The pid of the process holding ``socket_path``'s lock (the daemon serving it, or one
    starting or stopping on it), or None when nothing holds it."""
    content = holder_content(lock_path_for(Path(os.path.abspath(socket_path))))
    if content is None:
        return None
    text = content.decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _clear_stale_socket(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise BindError(
            f"{path} exists and is not a socket; remove it or choose another path with "
            f"--socket or {SOCKET_ENV}"
        )
    if _answers(path):
        # A listener that does not use our lock (an older or foreign daemon).
        raise DaemonAlreadyRunning(
            f"a server is already listening on {path}; stop it or choose another --socket"
        )
    os.unlink(path)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except OSError as error:
            if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise
    return True


@contextlib.contextmanager
def owner_only_umask() -> Iterator[None]:
    """New files (the socket, while gRPC binds it) get no group/other bits, so there is no
    window between bind and chmod in which others could connect."""
    previous = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(previous)


@dataclass(frozen=True, slots=True)
class LoopbackAddress:
    host: str
    port: int

    @property
    def target(self) -> str:
        """The gRPC address to bind."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen_address(address: str) -> LoopbackAddress:
    """``127.0.0.1:PORT``, ``[::1]:PORT`` or ``localhost:PORT`` (any loopback address; port 0
    picks a free one). Anything reachable from another machine is refused."""
    host, separator, port_text = address.strip().rpartition(":")
    if not separator or not port_text.isdigit() or int(port_text) > 65535:
        raise BindError(
            f"--listen {address!r}: expected HOST:PORT, e.g. 127.0.0.1:50051 or [::1]:50051"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host != "localhost":
        try:
            is_loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            is_loopback = False
        if not is_loopback:
            raise BindError(
                f"--listen {address!r}: only loopback addresses are allowed (127.0.0.1, [::1] "
                "or localhost); BetCode has no authentication on its local API"
            )
    return LoopbackAddress(host, int(port_text))
