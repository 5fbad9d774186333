"""Settings files, and the permission-rule layers that apply to one session.

Layers, highest first: CLI flags; `<cwd>/.claude/settings.local.json`;
`<cwd>/.claude/settings.json`; `<config dir>/settings.json`. For ordinary keys a higher layer
replaces a key's whole value, but permission lists (`permissions.allow`, `.deny`, `.ask`) are
collected from every layer, each rule keeping its source, as Claude Code does. Only those
three lists are read here; claude itself interprets everything else in its settings files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from betcode.config.errors import ConfigError, show_value

SETTINGS_FILE = "settings.json"
RuleListName = Literal["allow", "deny", "ask"]
# In the order they are checked.
RULE_LISTS: tuple[RuleListName, ...] = ("deny", "ask", "allow")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PermissionLists:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()

    def get(self, list_name: RuleListName) -> tuple[str, ...]:
        return getattr(self, list_name)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class RejectedEntry:
    """A permission-list entry that is not a rule string (reported like an invalid rule)."""

    list_name: RuleListName
    text: str
    reason: str


@dataclass(frozen=True, slots=True)
class SettingsLayer:
    """The permission rules of one layer. `base_dir` is what `/path` rules are relative to
    (None: the session's working directory)."""

    origin: str
    base_dir: Path | None
    rules: PermissionLists
    rejected: tuple[RejectedEntry, ...] = ()


def read_settings_file(path: Path) -> dict[str, object] | None:
    """The JSON object in `path`; None if there is no such file. An empty file is `{}`."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(str(path), None, f"cannot be read: {error.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), None, f"is not UTF-8 text (byte {error.start})") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        problem = f"malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        raise ConfigError(str(path), None, problem) from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), None, "must contain a JSON object at the top level")
    return data


def permission_layer(
    data: Mapping[str, object], origin: str, base_dir: Path | None
) -> SettingsLayer:
    """The `permissions` lists of one settings object; entries that are not strings are
    kept as rejected entries so they can be reported with the invalid rules."""
    permissions = data.get("permissions", {})
    if not isinstance(permissions, Mapping):
        log.warning(
            "%s: permissions must be an object, got %s; ignored", origin, show_value(permissions)
        )
        permissions = {}
    lists: dict[str, tuple[str, ...]] = {}
    rejected: list[RejectedEntry] = []
    for list_name in RULE_LISTS:
        entries = permissions.get(list_name, [])
        if not isinstance(entries, list):
            reason = f"permissions.{list_name} must be a list of rule strings"
            rejected.append(RejectedEntry(list_name, show_value(entries), reason))
            entries = []
        lists[list_name] = tuple(entry for entry in entries if isinstance(entry, str))
        rejected.extend(
            RejectedEntry(list_name, show_value(entry), "a rule must be a string")
            for entry in entries
            if not isinstance(entry, str)
        )
    rules = PermissionLists(lists["allow"], lists["deny"], lists["ask"])
    return SettingsLayer(origin, base_dir, rules, tuple(rejected))


def load_permission_layers(
    cwd: Path, config_dir: Path, cli_rules: PermissionLists | None = None
) -> list[SettingsLayer]:
    """The permission layers for a session in `cwd`, highest first. Missing files are skipped;
    a malformed one raises ConfigError naming the file, line and column."""
    layers: list[SettingsLayer] = []
    if cli_rules is not None:
        layers.append(SettingsLayer("cli", None, cli_rules))
    files = (
        (cwd / ".claude" / "settings.local.json", cwd),
        (cwd / ".claude" / SETTINGS_FILE, cwd),
        (config_dir / SETTINGS_FILE, config_dir),
    )
    for path, base_dir in files:
        data = read_settings_file(path)
        if data is not None:
            layers.append(permission_layer(data, str(path), base_dir))
    return layers
