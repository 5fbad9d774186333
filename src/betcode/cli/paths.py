"""Where the daemon's files are, as every `betcode` command resolves them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from betcode.config.dirs import config_dir, data_dir, default_socket_path


@dataclass(frozen=True, slots=True)
class DaemonPaths:
    socket: Path
    data_dir: Path

    @property
    def log_file(self) -> Path:
        return self.data_dir / "daemon.log"


def resolve_paths(socket: Path | None = None, data: Path | None = None) -> DaemonPaths:
    """Flags first, then BETCODE_SOCKET / BETCODE_DATA_DIR, then the platform defaults."""
    return DaemonPaths(
        socket=(socket or default_socket_path(config_dir())).absolute(),
        data_dir=(data or data_dir()).absolute(),
    )
