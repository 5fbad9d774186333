"""`<config dir>/settings.json` as ConfigService reads and edits it.

Reading: the daemon settings resolved exactly as the daemon loads them (`config.resolve`: the
file, the environment, the daemon's `--set` flags), each with where its value came from.
Editing: a change is validated by that same loader first (the changed values layered on top of
everything else); only a change that loads is
written, in one atomic replace of the file, keeping every other key of it (the rest is Claude
Code's settings format). A rejected change leaves the file untouched.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from betcode.config.errors import ConfigError, show_value
from betcode.config.keys import DAEMON_PREFIX, KNOWN_KEYS, set_dotted
from betcode.config.layers import (
    RULE_LISTS,
    SETTINGS_FILE,
    RuleListName,
    SettingsLayer,
    permission_layer,
    read_settings_file,
)
from betcode.config.origins import DEFAULT_ORIGIN
from betcode.config.resolve import ResolvedSettings, load_daemon_settings, resolve_daemon_settings
from betcode.permissions.engine import RuleSet
from betcode.permissions.rules import InvalidRule


class RejectedChange(ValueError):
    """A requested change that cannot be made; nothing was written."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class ConfigStore:
    """`overrides`: the daemon's command-line settings (dotted keys below `daemon`)."""

    def __init__(
        self,
        config_dir: Path,
        environ: Mapping[str, str],
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        self.config_dir = config_dir
        self.path = config_dir / SETTINGS_FILE
        self._environ = environ
        self._overrides = dict(overrides or {})

    # ---- daemon settings ----

    def resolve(self) -> ResolvedSettings:
        """The effective daemon settings; ConfigError if the file cannot be used."""
        return resolve_daemon_settings(self.config_dir, self._overrides, environ=self._environ)

    def change_settings(self, changes: Mapping[str, object]) -> None:
        """Validate `changes` (dotted keys from the top, values as in JSON) and write them.

        Raises RejectedChange naming the key, the value and what is allowed, or ConfigError
        if the file itself cannot be used (then nothing can be changed until it is fixed)."""
        current = self.resolve()
        for key in changes:
            if key not in KNOWN_KEYS:
                raise RejectedChange(key, f"{key}: no such setting")
            origin = current.value(key).origin
            if origin not in (DEFAULT_ORIGIN, str(self.path)):
                raise RejectedChange(
                    key, f"{key}: set by {origin}, which wins over {self.path}; change it there"
                )
        overrides = {key.removeprefix(DAEMON_PREFIX): value for key, value in changes.items()}
        try:
            load_daemon_settings(
                self.config_dir, {**self._overrides, **overrides}, environ=self._environ
            )
        except ConfigError as error:
            key = error.key or ""
            if any(_related(key, changed) for changed in changes):
                raise RejectedChange(key, f"{key}: {error.problem}") from None
            raise
        data = self._read()
        for key, value in changes.items():
            set_dotted(data, key, value)
        write_atomically(self.path, data)

    # ---- permission rules ----

    def permission_rules(self) -> tuple[RuleSet, list[InvalidRule]]:
        """The rules of this file alone (the layer ConfigService edits)."""
        return RuleSet.from_settings([self._layer(self._read())])

    def replace_permission_rules(self, lists: Mapping[RuleListName, Iterable[str]]) -> None:
        """Replace the allow/deny/ask lists (other keys of `permissions` are kept). Every rule
        must parse; otherwise RejectedChange names each bad rule and why, and nothing is written."""
        data = self._read()
        permissions = data.setdefault("permissions", {})
        if not isinstance(permissions, dict):
            problem = f"must be an object, got {show_value(permissions)}"
            raise ConfigError(str(self.path), "permissions", problem)
        new = {name: list(dict.fromkeys(lists.get(name, ()))) for name in RULE_LISTS}
        _, invalid = RuleSet.from_settings([self._layer({"permissions": new})])
        if invalid:
            problems = "; ".join(
                f"{e.source.list_name} rule {e.text!r}: {e.reason}" for e in invalid
            )
            raise RejectedChange("permissions", f"invalid permission rules: {problems}")
        permissions.update(new)
        write_atomically(self.path, data)

    # ---- helpers ----

    def _read(self) -> dict[str, object]:
        return read_settings_file(self.path) or {}

    def _layer(self, data: Mapping[str, object]) -> SettingsLayer:
        return permission_layer(data, str(self.path), self.config_dir)


def write_atomically(path: Path, data: Mapping[str, object]) -> None:
    """Replace `path` with `data` as JSON in one step: readers see the old file or the new one,
    never a part. A symlinked settings file stays a link (its target is replaced); the file
    keeps its permission bits (0600 when new)."""
    target = path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def _related(key: str, other: str) -> bool:
    """Whether one dotted key is the other or contains it."""
    return key == other or key.startswith(other + ".") or other.startswith(key + ".")
