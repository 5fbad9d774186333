"""The checks a start makes before it changes anything a refused start would have to undo,
each refusal with its exit code: where to serve and the locks of the data dir and the socket
(69), the claude CLI (72 missing, 78 too old), the database and its audit log (74)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from betcode.claude.locate import ClaudeBinary, ClaudeNotFound, find_claude_binary
from betcode.daemon_config import DaemonConfig
from betcode.daemon_socket import (
    BindError,
    LoopbackAddress,
    SocketClaim,
    claim_socket_path,
    parse_listen_address,
)
from betcode.protocol.version import EXIT_CLAUDE_MISSING, probe_claude_version
from betcode.server.claude_status import ClaudeCodeReport
from betcode.storage.audit import require_audit_log
from betcode.storage.data_dir_lock import DataDirClaim, DataDirInUse, claim_data_dir
from betcode.storage.database import Database, open_database
from betcode.storage.errors import StorageError
from betcode.v1 import version_pb2

EXIT_CANNOT_LISTEN = 69  # EX_UNAVAILABLE: another daemon serves the socket, or a bad address
EXIT_STORAGE_UNUSABLE = 74  # EX_IOERR: the database is corrupt or lacks its audit_log

log = logging.getLogger(__name__)


class DaemonStartupError(Exception):
    """A startup failure with the process exit code it maps to."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Claims:
    """The data dir's lock and the socket's: taken before anything else, released last (a
    newcomer may open the database only once we are done with it)."""

    data_dir: DataDirClaim | None = None
    socket: SocketClaim | None = None

    def release(self) -> None:
        for claim in (self.socket, self.data_dir):
            if claim is not None:
                claim.release()


def claim_places(
    config: DaemonConfig, claims: Claims
) -> tuple[SocketClaim, LoopbackAddress | None]:
    """Checks where to serve, then takes the data dir's lock and the socket's: all before the
    database is opened or anything reconciled, so a refused start changes nothing."""
    try:
        tcp_address = parse_listen_address(config.listen) if config.listen else None
        claims.data_dir = claim_data_dir(config.data_dir, config.socket_path)
        claims.socket = claim_socket_path(config.socket_path)
    except (BindError, DataDirInUse) as exc:
        raise DaemonStartupError(str(exc), EXIT_CANNOT_LISTEN) from exc
    return claims.socket, tcp_address


async def check_claude(config: DaemonConfig) -> tuple[ClaudeBinary, ClaudeCodeReport]:
    """The claude binary to run, and the report on it that health and VersionService give."""
    try:
        binary = find_claude_binary(config.claude_bin, config.environ)
    except ClaudeNotFound as exc:
        raise DaemonStartupError(str(exc), EXIT_CLAUDE_MISSING) from exc
    probe = await probe_claude_version(str(binary.path))
    if probe.exit_code is not None:
        raise DaemonStartupError(f"claude at {binary.path}: {probe.message}", probe.exit_code)
    version_text = str(probe.version) if probe.version is not None else "unknown"
    report = ClaudeCodeReport(
        binary_path=str(binary.path),
        binary_source=str(binary.source),
        version=version_text,
        api_version=(probe.version.api_version or "") if probe.version is not None else "",
        compatibility=version_pb2.CompatibilityLevel.ValueType(int(probe.level)),
        message=probe.message,
    )
    log.info("claude %s (%s) at %s", version_text, probe.level.name, binary.path)
    return binary, report


async def open_checked_database(config: DaemonConfig) -> Database:
    """The database, migrated, with its audit log."""
    try:
        database = await asyncio.to_thread(open_database, config.database_path)
        await asyncio.to_thread(require_audit_log, database)
    except StorageError as exc:
        raise DaemonStartupError(str(exc), EXIT_STORAGE_UNUSABLE) from exc
    return database
