"""The one error type of configuration loading: it always says where and what to fix."""

from __future__ import annotations

import json


class ConfigError(Exception):
    """A setting that cannot be used. `origin` is a file path, "command line" or an environment
    variable; `key` is the dotted path of the setting (None for whole-file problems)."""

    def __init__(self, origin: str, key: str | None, problem: str) -> None:
        where = f"{origin}: {key}" if key else origin
        super().__init__(f"{where}: {problem}")
        self.origin = origin
        self.key = key
        self.problem = problem


def show_value(value: object) -> str:
    """A value as the user wrote it in JSON (strings quoted)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
