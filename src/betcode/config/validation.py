"""The daemon settings' raw values (what the layers of `config.resolve` gave) checked and made
into `DaemonSettings`. A bad value is a ConfigError naming where it came from, the dotted key,
the value and what is allowed (`betcode daemon start` exits 65 with it); an unknown key is
logged at WARN and ignored."""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Mapping

from betcode.config.errors import ConfigError, show_value
from betcode.config.origins import Origins
from betcode.config.settings import DaemonSettings, SettingConflict
from betcode.config.values import SPEC, Rejected, Spec

log = logging.getLogger(__name__)
_T = typing.TypeVar("_T")


def build_settings(values: Mapping[str, object], origins: Origins) -> DaemonSettings:
    """`values` (the `daemon` object, every layer applied) as checked settings."""
    return _build(DaemonSettings, values, "", origins)


def _build(cls: type[_T], data: Mapping[str, object], prefix: str, origins: Origins) -> _T:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, object] = {}
    known: set[str] = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        known.add(f.name)
        if f.name not in data:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        value = data[f.name]
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            if not isinstance(value, Mapping):
                problem = f"must be an object, got {show_value(value)}"
                raise ConfigError(origins.of(key), f"daemon.{key}", problem)
            kwargs[f.name] = _build(kind, value, key, origins)
            continue
        spec: Spec = f.metadata[SPEC]
        try:
            kwargs[f.name] = spec.convert(value)
        except Rejected as rejected:
            problem = f"{show_value(value)} {rejected}"
            raise ConfigError(origins.of(key), f"daemon.{key}", problem) from None
    for unknown in sorted(set(data) - known):
        key = f"{prefix}.{unknown}" if prefix else unknown
        log.warning("%s: unknown setting daemon.%s ignored", origins.of(key), key)
    try:
        return cls(**kwargs)
    except SettingConflict as conflict:
        key = f"{prefix}.{conflict.key}" if prefix else conflict.key
        raise ConfigError(origins.of(key), f"daemon.{key}", str(conflict)) from None
    except ValueError as error:
        raise ConfigError(origins.of(prefix), f"daemon.{prefix}".rstrip("."), str(error)) from None
