"""Forgiving, typed access to one decoded JSON object (docs/PROTOCOL.md#tolerant-reading).

Missing and null values give the default. Reasonable alternatives are accepted: numbers given as
strings ("12"), booleans given as "true"/"false" or 0/1, numbers where text is expected. Any other
value of the wrong type also gives the default, and is recorded in `problems` so the reader can
count and log it.
"""

from __future__ import annotations

import math
from typing import Any

_TRUE_TEXTS = frozenset({"true", "1", "yes"})
_FALSE_TEXTS = frozenset({"false", "0", "no", ""})


class FieldReader:
    __slots__ = ("_path", "problems", "raw")

    def __init__(self, raw: object, path: str = "$", problems: list[str] | None = None) -> None:
        self.problems: list[str] = [] if problems is None else problems
        self._path = path
        if isinstance(raw, dict):
            self.raw: dict[str, Any] = raw
        else:
            if raw is not None:
                self._problem(path, "an object", raw)
            self.raw = {}

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def child(self, key: str) -> FieldReader:
        """The object at `key` (an empty one when missing or not an object)."""
        return FieldReader(self.raw.get(key), f"{self._path}.{key}", self.problems)

    def text(self, key: str, default: str = "") -> str:
        value = self.opt_text(key)
        return default if value is None else value

    def opt_text(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        self._problem(key, "text", value)
        return None

    def integer(self, key: str, default: int = 0) -> int:
        value = self.opt_integer(key)
        return default if value is None else value

    def opt_integer(self, key: str) -> int | None:
        number = self.opt_number(key)
        return None if number is None else int(number)

    def opt_number(self, key: str) -> float | None:
        value = self.raw.get(key)
        if value is None:
            return None
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):
            number = _parse_number(value)
        if number is not None and math.isfinite(number):
            return number
        self._problem(key, "a number", value)
        return None

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE_TEXTS | _FALSE_TEXTS:
            return value.strip().lower() in _TRUE_TEXTS
        self._problem(key, "a boolean", value)
        return default

    def obj(self, key: str) -> dict[str, Any]:
        value = self.opt_obj(key)
        return {} if value is None else value

    def opt_obj(self, key: str) -> dict[str, Any] | None:
        value = self.raw.get(key)
        if value is None or isinstance(value, dict):
            return value
        self._problem(key, "an object", value)
        return None

    def items(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self._problem(key, "a list", value)
        return []

    def objects(self, key: str) -> list[dict[str, Any]]:
        """The objects in the list at `key`; other items are dropped (and recorded)."""
        found = []
        for item in self.items(key):
            if isinstance(item, dict):
                found.append(item)
            else:
                self._problem(f"{key}[]", "an object", item)
        return found

    def each(self, key: str) -> list[FieldReader]:
        """Readers for the objects in the list at `key`, recording into the same problems."""
        path = f"{self._path}.{key}[]"
        return [FieldReader(item, path, self.problems) for item in self.objects(key)]

    def texts(self, key: str) -> list[str]:
        """The strings in the list at `key`; other items are dropped (and recorded)."""
        found = []
        for item in self.items(key):
            if isinstance(item, str):
                found.append(item)
            else:
                self._problem(f"{key}[]", "text", item)
        return found

    def _problem(self, key: str, expected: str, value: object) -> None:
        where = key if key.startswith("$") else f"{self._path}.{key}"
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        self.problems.append(f"{where}: expected {expected}, got {shown}")


def _parse_number(text: str) -> float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None
