"""The daemon settings resolved from their layers: `<config dir>/settings.json`, the
environment, the command line.

They live under the `daemon` key of the settings file (the rest of that file is Claude Code's
settings format, of which BetCode reads only `permissions`). Precedence, highest first:
command-line flags (`overrides`: dotted keys below `daemon`, such as
`crash_policy.max_crashes`), the environment variables in ENV_KEYS, the file, the built-in
defaults. A higher layer replaces a key's whole value: overriding `crash_policy` with an object
resets the fields it omits to their defaults, not to the file's values.

Every value is then checked (`config.validation`). `resolve_daemon_settings` also tells, for
every leaf setting, where its value came from and what it allows (ConfigService's GetSettings
and `betcode config show` show both).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from betcode.config.errors import ConfigError, show_value
from betcode.config.keys import DAEMON_PREFIX, KNOWN_KEYS, set_dotted, settings_items, spec_of
from betcode.config.layers import SETTINGS_FILE, read_settings_file
from betcode.config.origins import COMMAND_LINE, Origins
from betcode.config.settings import DaemonSettings
from betcode.config.validation import UnknownSetting, build_settings

ENV_KEYS = {
    "BETCODE_LOG_LEVEL": "log_level",
    "BETCODE_MAX_PAYLOAD_BYTES": "max_payload_bytes",
    "BETCODE_MAX_SESSIONS": "max_sessions",
    "BETCODE_MAX_SUBAGENTS": "subagent.max_concurrent",
    "BETCODE_SUBPROCESS_TIMEOUT": "subprocess.timeout_seconds",
}

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SettingValue:
    key: str  # dotted, from the top of settings.json: "daemon.permission.ttl_seconds"
    value: object
    # DEFAULT_ORIGIN, the settings file's path, "environment variable NAME" or COMMAND_LINE
    origin: str
    allowed: str  # what the setting accepts, e.g. "allowed 1h to 30d"


@dataclass(frozen=True, slots=True)
class ResolvedSettings:
    settings: DaemonSettings
    values: tuple[SettingValue, ...]  # every leaf setting, in declaration order
    unknown: tuple[UnknownSetting, ...] = ()  # keys that are no setting (ignored)

    def value(self, key: str) -> SettingValue:
        return next(v for v in self.values if v.key == key)


def load_daemon_settings(
    config_dir: Path,
    overrides: Mapping[str, object] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> DaemonSettings:
    """Settings from `<config dir>/settings.json`, the environment and flags (module doc); an
    unknown key is logged at WARN and ignored."""
    settings, _, unknown = _load(config_dir, overrides, environ)
    for setting in unknown:
        log.warning("%s: unknown setting %s ignored", setting.origin, setting.key)
    return settings


def resolve_daemon_settings(
    config_dir: Path,
    overrides: Mapping[str, object] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ResolvedSettings:
    """The settings `load_daemon_settings` gives, each leaf with its origin and allowed values."""
    settings, origins, unknown = _load(config_dir, overrides, environ)
    values = tuple(
        SettingValue(
            key, value, origins.of(key.removeprefix(DAEMON_PREFIX)), spec_of(key).allowed_text()
        )
        for key, value in settings_items(settings)
    )
    return ResolvedSettings(settings, values, unknown)


def parse_override(text: str) -> tuple[str, object]:
    """A `--set KEY=VALUE` flag: KEY a dotted daemon setting (a leading `daemon.` is optional),
    VALUE JSON when it parses as JSON (numbers, booleans, lists), else text."""
    key, separator, raw = text.partition("=")
    key = key.strip().removeprefix(DAEMON_PREFIX)
    if not separator or not key:
        example = "crash_policy.max_crashes=3"
        raise ConfigError(COMMAND_LINE, None, f"--set {text!r}: expected KEY=VALUE, e.g. {example}")
    leaves = {name.removeprefix(DAEMON_PREFIX) for name in KNOWN_KEYS}
    # A whole section may be set too, as a JSON object: `crash_policy={"max_crashes": 3}`.
    sections = {f.name for f in dataclasses.fields(DaemonSettings)}
    if key not in leaves | sections:
        problem = "is not a daemon setting (`betcode config show` lists them)"
        raise ConfigError(COMMAND_LINE, f"daemon.{key}", problem)
    return key, _text_value(raw)


def _load(
    config_dir: Path, overrides: Mapping[str, object] | None, environ: Mapping[str, str] | None
) -> tuple[DaemonSettings, Origins, tuple[UnknownSetting, ...]]:
    path = config_dir / SETTINGS_FILE
    data = read_settings_file(path) or {}
    section = data.get("daemon", {})
    if not isinstance(section, Mapping):
        raise ConfigError(str(path), "daemon", f"must be an object, got {show_value(section)}")
    values = copy.deepcopy(dict(section))
    origins = Origins(str(path), section)
    _read_top_level_worktree(data, values, origins)
    env = os.environ if environ is None else environ
    for name, key in ENV_KEYS.items():
        if env.get(name):
            set_dotted(values, key, _text_value(env[name]))
            origins.set(key, f"environment variable {name}")
    for key, value in (overrides or {}).items():
        set_dotted(values, key, value)
        origins.set(key, COMMAND_LINE)
    settings, unknown = build_settings(values, origins)
    return settings, origins, unknown


def _read_top_level_worktree(
    data: Mapping[str, object], values: dict[str, object], origins: Origins
) -> None:
    """The settings layout places the worktree settings in a top-level `worktree` section: it is
    read as `daemon.worktree` unless that exists, which then wins whole."""
    if "worktree" not in data:
        return
    if "worktree" in values:
        log.warning("%s: top-level worktree ignored; daemon.worktree is used", origins.file)
        return
    values["worktree"] = copy.deepcopy(data["worktree"])
    origins.set("worktree", f"{origins.file} (top-level worktree)")


def _text_value(raw: str) -> object:
    """Environment and flag values are JSON when they parse as JSON (numbers, booleans), else
    text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw
