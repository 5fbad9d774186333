"""The daemon settings by dotted key (`daemon.permission.ttl_seconds`): every leaf in
declaration order, the load-time check of each, and its value spelled for people."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

from betcode.config.errors import show_value
from betcode.config.settings import DaemonSettings
from betcode.config.values import SPEC, Spec, format_duration

DAEMON_PREFIX = "daemon."

_T = typing.TypeVar("_T")


def settings_items(settings: object, prefix: str = "daemon") -> list[tuple[str, object]]:
    """(dotted key, value) for every leaf setting, in declaration order."""
    items: list[tuple[str, object]] = []
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        key = f"{prefix}.{f.name}"
        if dataclasses.is_dataclass(value):
            items.extend(settings_items(value, key))
        else:
            items.append((key, value))
    return items


KNOWN_KEYS = frozenset(key for key, _ in settings_items(DaemonSettings()))


def spec_of(key: str) -> Spec:
    """The load-time check of the setting at dotted `key` (one of KNOWN_KEYS)."""
    cls: type = DaemonSettings
    *parents, leaf = key.removeprefix(DAEMON_PREFIX).split(".")
    for name in parents:
        cls = typing.get_type_hints(cls)[name]
    spec: Spec = next(f for f in dataclasses.fields(cls) if f.name == leaf).metadata[SPEC]
    return spec


def display_value(key: str, value: object) -> str:
    """A setting's value for people (`config show`, the reload log): durations spelled like
    "10m", everything else as JSON."""
    kind = spec_of(key).kind
    if kind == "seconds" and isinstance(value, int | float):
        return format_duration(value)
    if kind == "seconds_list" and isinstance(value, list | tuple):
        return ", ".join(format_duration(seconds) for seconds in value)
    return show_value(value)


def most_specific(table: Mapping[str, _T], key: str) -> _T | None:
    """The entry of `table` for dotted `key` or, failing that, for its nearest enclosing
    section (`a.b.c`, then `a.b`, then `a`); None if there is none."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        found = table.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def set_dotted(data: dict[str, object], key: str, value: object) -> None:
    """Sets dotted `key` in nested objects, making (or replacing with) an object each section
    on the way that is not one."""
    *parents, leaf = key.split(".")
    node = data
    for name in parents:
        child = node.get(name)
        if not isinstance(child, dict):
            child = {}
            node[name] = child
        node = child
    node[leaf] = value
