"""Where BetCode keeps its files. Environment variables win; empty ones count as unset.

| what | where |
|---|---|
| config dir | `$BETCODE_CONFIG_DIR`; Linux `$XDG_CONFIG_HOME/betcode` (`~/.config/betcode`); macOS `~/Library/Application Support/betcode`; Windows `%USERPROFILE%\\.betcode` |
| data dir | `$BETCODE_DATA_DIR`, else the platform's user data dir (`~/.local/share/betcode`) |
| socket | `$BETCODE_SOCKET`, else `$XDG_RUNTIME_DIR/betcode/daemon.sock`, else `<config dir>/daemon.sock` |
"""  # noqa: E501

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "betcode"
SOCKET_NAME = "daemon.sock"
SOCKET_ENV = "BETCODE_SOCKET"


def config_dir() -> Path:
    """BetCode's configuration directory (it may not exist yet: see `importer`)."""
    explicit = _env_path("BETCODE_CONFIG_DIR")
    if explicit is not None:
        return explicit
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    if sys.platform == "win32":
        profile = os.environ.get("USERPROFILE")
        return (Path(profile) if profile else Path.home()) / f".{APP_NAME}"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / APP_NAME
    return Path.home() / ".config" / APP_NAME


def data_dir() -> Path:
    """Where the database, logs and claude's scratch files live."""
    explicit = _env_path("BETCODE_DATA_DIR")
    if explicit is not None:
        return explicit
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_socket_path(config_dir: Path) -> Path:
    """The daemon's Unix socket when no `--socket` flag is given."""
    explicit = _env_path(SOCKET_ENV)
    if explicit is not None:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_absolute():
        return Path(runtime) / APP_NAME / SOCKET_NAME
    return config_dir / SOCKET_NAME


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser().absolute() if value else None
