"""Typed setting values: durations, ranges, and the checks each kind of setting gets at load.

A duration is a number of seconds or a string of `<number><unit>` groups, units `ms`, `s`, `m`,
`h`, `d`, `w` (`"90s"`, `"1h"`, `"1h30m"`, `"7d"`); a bare numeric string is seconds.
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SECOND = 1.0
MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY
MIB = 1024 * 1024

_UNITS = {"ms": 0.001, "s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY, "w": WEEK}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")

SPEC = "betcode.setting"


class Rejected(ValueError):
    """A value a setting cannot take; the message completes "<value> ..."."""


def parse_duration(value: object) -> float:
    """Seconds from a number or a duration string; raises Rejected otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = value.replace(" ", "").lower() if isinstance(value, str) else ""
    if _NUMBER.fullmatch(text):
        return float(text)
    if not text or not _DURATION.fullmatch(text):
        raise Rejected('is not a duration (seconds, or a string such as "90s", "1h", "7d")')
    return sum(float(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    """The shortest exact spelling: 604800 -> "7d", 5400 -> "1h30m", 0.5 -> "500ms"."""
    if seconds == 0:
        return "0s"
    if seconds < 1 or seconds != int(seconds):
        return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"
    rest = int(seconds)
    out: list[str] = []
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", SECOND)):
        count, rest = divmod(rest, int(size))
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Spec:
    """How one setting is checked: its kind and allowed range or choices."""

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def convert(self, value: object) -> object:
        return _CONVERTERS[self.kind](self, value)

    def range_text(self) -> str:
        show = format_duration if self.kind in ("seconds", "seconds_list") else _number
        return f"allowed {show(self.low or 0)} to {show(self.high or 0)}"

    def allowed_text(self) -> str:
        """What a value of this setting may be, for people: "allowed 1h to 30d", "true or false"."""
        if self.kind in ("int", "float", "seconds", "seconds_list"):
            return self.range_text()
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "names":
            return "a list of environment variable names or PREFIX_* patterns"
        if self.kind == "text":
            return "a string (empty: not set)"
        if self.kind == "urls":
            return "a list of URLs (empty: none)"
        if self.kind == "path":
            return "an absolute path (empty: the default)"
        if self.kind == "shell_lines":
            return "a list of shell command lines"
        return "a command (a string, or a list of program and arguments), or null"


def setting(default: Any, kind: str, low: float | None = None, high: float | None = None,
            choices: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """A dataclass field with its load-time check (construction in code is not range-checked)."""
    return field(default=default, metadata={SPEC: Spec(kind, low, high, choices)})


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


def _in_range(spec: Spec, number: float) -> None:
    if not math.isfinite(number):
        raise Rejected("is not a finite number")
    too_low = spec.low is not None and number < spec.low
    if too_low or (spec.high is not None and number > spec.high):
        raise Rejected(f"is out of range ({spec.range_text()})")


def _int(spec: Spec, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rejected("is not a whole number")
    _in_range(spec, value)
    return value


def _float(spec: Spec, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected("is not a number")
    _in_range(spec, float(value))
    return float(value)


def _seconds(spec: Spec, value: object) -> float:
    seconds = parse_duration(value)
    _in_range(spec, seconds)
    return seconds


def _seconds_list(spec: Spec, value: object) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise Rejected("is not a list of durations")
    result = tuple(_seconds(spec, item) for item in value)
    if any(later <= earlier for earlier, later in itertools.pairwise(result)):
        raise Rejected("must be in increasing order")
    return result


def _bool(spec: Spec, value: object) -> bool:
    if not isinstance(value, bool):
        raise Rejected("is not true or false")
    return value


def _choice(spec: Spec, value: object) -> str:
    if not isinstance(value, str) or value.lower() not in spec.choices:
        raise Rejected(f"is not one of {', '.join(spec.choices)}")
    return value.lower()


def _names(spec: Spec, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Rejected("is not a list of environment variable names")
    bad = [item for item in value if not _ENV_NAME.fullmatch(item)]
    if bad:
        raise Rejected(f"contains {bad[0]!r}, not a variable name or a PREFIX_* pattern")
    return tuple(value)


def _urls(spec: Spec, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise Rejected("is not a list of URLs")
    return tuple(value)


def _path(spec: Spec, value: object) -> str:
    if not isinstance(value, str) or (value and not value.startswith("/")):
        raise Rejected("is not an absolute path")
    return value


def _shell_lines(spec: Spec, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise Rejected("is not a list of non-empty shell command lines")
    return tuple(value)


def _text(spec: Spec, value: object) -> str:
    if not isinstance(value, str):
        raise Rejected("is not a string")
    return value


def _argv(spec: Spec, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as error:
            raise Rejected(f"is not a command line: {error}") from None
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise Rejected("is not a command (a string, or a list of program and arguments)")
    return tuple(value)


_CONVERTERS: dict[str, Callable[[Spec, object], Any]] = {
    "int": _int,
    "float": _float,
    "seconds": _seconds,
    "seconds_list": _seconds_list,
    "bool": _bool,
    "choice": _choice,
    "names": _names,
    "argv": _argv,
    "urls": _urls,
    "text": _text,
    "path": _path,
    "shell_lines": _shell_lines,
}
