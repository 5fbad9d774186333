"""The daemon settings' raw values (what the layers of `config.resolve` gave) checked and made
into `DaemonSettings`. A bad value is a ConfigError naming where it came from, the dotted key,
the value and what is allowed (`betcode daemon start` exits 65 with it); an unknown key is
ignored, and returned: the daemon logs it at WARN, `betcode config check` fails on it."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping

from betcode.config.errors import ConfigError, show_value
from betcode.config.origins import Origins
from betcode.config.settings import DaemonSettings, SettingConflict
from betcode.config.values import SPEC, Rejected, Spec

_T = typing.TypeVar("_T")


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownSetting:
    """A key under `daemon` that no setting has, most likely a misspelling."""

    key: str  # dotted, from the top of settings.json: "daemon.max_sesions"
    origin: str  # the file (or layer) that holds it
    closest: str | None  # the known key of that section it most resembles, if one does

    def __str__(self) -> str:
        hint = f" (did you mean {self.closest}?)" if self.closest else ""
        return f"{self.origin}: unknown setting {self.key}{hint}"


def build_settings(
    values: Mapping[str, object], origins: Origins
) -> tuple[DaemonSettings, tuple[UnknownSetting, ...]]:
    """`values` (the `daemon` object, every layer applied) as checked settings, and the keys
    in it that are no setting."""
    unknown: list[UnknownSetting] = []
    settings = _build(DaemonSettings, values, "", origins, unknown)
    return settings, tuple(unknown)


def _build(
    cls: type[_T],
    data: Mapping[str, object],
    prefix: str,
    origins: Origins,
    unknown: list[UnknownSetting],
) -> _T:
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
            kwargs[f.name] = _build(kind, value, key, origins, unknown)
            continue
        spec: Spec = f.metadata[SPEC]
        try:
            kwargs[f.name] = spec.convert(value)
        except Rejected as rejected:
            problem = f"{show_value(value)} {rejected}"
            raise ConfigError(origins.of(key), f"daemon.{key}", problem) from None
    section = f"daemon.{prefix}" if prefix else "daemon"
    for name in sorted(set(data) - known):
        key = f"{prefix}.{name}" if prefix else name
        close = difflib.get_close_matches(name, sorted(known), n=1)
        closest = f"{section}.{close[0]}" if close else None
        unknown.append(UnknownSetting(f"{section}.{name}", origins.of(key), closest))
    try:
        return cls(**kwargs)
    except SettingConflict as conflict:
        key = f"{prefix}.{conflict.key}" if prefix else conflict.key
        raise ConfigError(origins.of(key), f"daemon.{key}", str(conflict)) from None
    except ValueError as error:
        raise ConfigError(origins.of(prefix), f"daemon.{prefix}".rstrip("."), str(error)) from None
