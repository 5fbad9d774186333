"""A reload (SIGHUP, or a ConfigService change): the daemon settings read again (files,
environment, the start's flags) and validated as a whole. A bad value is logged (file, key,
value, allowed range) and kept for the `config` health component; the previous settings stay
in force, untouched. Otherwise each changed key is logged with when it takes effect
(`daemon_config.TAKES_EFFECT`); `betcode.daemon` hands the new settings to each part."""

from __future__ import annotations

import logging
from pathlib import Path

from betcode.config.errors import ConfigError
from betcode.config.keys import display_value
from betcode.config.settings import DaemonSettings
from betcode.daemon_config import (
    PYTHON_LOG_LEVELS,
    DaemonConfig,
    read_settings,
    takes_effect,
    with_settings,
)
from betcode.server.health import ComponentReport

log = logging.getLogger(__name__)

Change = tuple[str, object, object]  # dotted key, old value, new value


class Reloads:
    """The reloads so far, for the `config` health component."""

    def __init__(self, settings_file: Path) -> None:
        self._settings_file = settings_file
        self._count = 0
        self._problem: str | None = None

    def read(self, config: DaemonConfig) -> DaemonConfig | None:
        """`config` with its settings read again; None (logged, kept) if one is invalid."""
        log.info("configuration reload: reading %s", self._settings_file)
        try:
            fresh = with_settings(config, read_settings(config))
        except ConfigError as error:
            self._problem = str(error)
            log.error("configuration reload refused: %s; keeping the previous one", error)
            return None
        self._problem = None
        self._count += 1
        return fresh

    def report(self) -> ComponentReport:
        found = self._settings_file.is_file()  # one stat, when asked for the health report
        message = (
            f"settings from {self._settings_file}"
            if found
            else f"defaults: no {self._settings_file}"
        )
        if self._problem is not None:
            message += f"; the last reload failed, previous settings kept: {self._problem}"
        elif self._count:
            message += f"; reloaded {self._count} time(s)"
        return ComponentReport(True, message)


def apply_log_level(changes: list[Change], settings: DaemonSettings) -> None:
    if any(key == "daemon.log_level" for key, _, _ in changes):
        logging.getLogger().setLevel(PYTHON_LOG_LEVELS[settings.log_level])


def log_changes(changes: list[Change]) -> None:
    for key, old, new in changes:
        log.info(
            "configuration reload: %s changed from %s to %s (%s)",
            key,
            display_value(key, old),
            display_value(key, new),
            takes_effect(key),
        )
    if not changes:
        log.info("configuration reload: daemon settings unchanged")
