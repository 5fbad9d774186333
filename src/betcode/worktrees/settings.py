"""The `worktree` section of settings.json (DIGEST CFG-08, WT-07/08).

    "worktree": {
        "base_dir": "/abs/path",           # GLOBAL placement root; default <data dir>/worktrees
        "setup_commands": ["npm ci"],      # run in a new worktree when no script is given
        "setup_timeout_secs": 120,         # 1-3600: a setup still running then is killed
        "min_free_bytes": 104857600        # kept free on the disk after a checkout
    }

Read when the daemon starts; a bad value is a ConfigError naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from betcode.config.errors import ConfigError, show_value
from betcode.config.layers import SETTINGS_FILE, read_settings_file

DEFAULT_SETUP_TIMEOUT_SECS = 120.0
DEFAULT_MIN_FREE_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorktreeSettings:
    base_dir: Path
    setup_commands: tuple[str, ...] = ()
    setup_timeout_secs: float = DEFAULT_SETUP_TIMEOUT_SECS
    min_free_bytes: int = DEFAULT_MIN_FREE_BYTES


def load_worktree_settings(config_dir: Path, data_dir: Path) -> WorktreeSettings:
    path = config_dir / SETTINGS_FILE
    data = read_settings_file(path) or {}
    section = data.get("worktree", {})
    if not isinstance(section, Mapping):
        raise ConfigError(str(path), "worktree", f"must be an object, got {show_value(section)}")
    return _parse(str(path), section, data_dir)


def _parse(origin: str, section: Mapping[str, object], data_dir: Path) -> WorktreeSettings:
    base = section.get("base_dir", str(data_dir / "worktrees"))
    if not isinstance(base, str) or not Path(base).is_absolute():
        raise ConfigError(origin, "worktree.base_dir", "must be an absolute path")
    commands = section.get("setup_commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) and c for c in commands):
        raise ConfigError(
            origin, "worktree.setup_commands", "must be a list of non-empty shell command lines"
        )
    timeout = section.get("setup_timeout_secs", DEFAULT_SETUP_TIMEOUT_SECS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 1 <= timeout <= 3600
    ):
        raise ConfigError(
            origin, "worktree.setup_timeout_secs", f"{show_value(timeout)}: allowed 1 to 3600"
        )
    free = section.get("min_free_bytes", DEFAULT_MIN_FREE_BYTES)
    if isinstance(free, bool) or not isinstance(free, int) or free < 0:
        raise ConfigError(origin, "worktree.min_free_bytes", f"{show_value(free)}: must be >= 0")
    return WorktreeSettings(Path(base), tuple(commands), float(timeout), free)
