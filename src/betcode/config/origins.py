"""Where each daemon setting's value came from, for `betcode config show`, ConfigService and
the error that names what to fix: the default, the settings file, an environment variable or
the command line."""

from __future__ import annotations

from collections.abc import Mapping

from betcode.config.keys import most_specific

COMMAND_LINE = "command line"
DEFAULT_ORIGIN = "default"


class Origins:
    """Where each value came from: the last layer that set the key or a section holding it (the
    environment, then flags), else the file if it has the key, else the default."""

    def __init__(self, file: str, section: Mapping[str, object]) -> None:
        self.file = file
        self._section = section
        self._by_key: dict[str, str] = {}

    def set(self, key: str, origin: str) -> None:
        """A layer set dotted `key`; it replaces that whole value, so nothing below it keeps the
        origin of a lower layer."""
        for below in [k for k in self._by_key if k.startswith(key + ".")]:
            del self._by_key[below]
        self._by_key[key] = origin

    def of(self, key: str) -> str:
        """Where the value at dotted `key` (relative to `daemon`) came from. For a section, a
        layer that set a key inside it is named (its error may come from that key)."""
        origin = most_specific(self._by_key, key)
        if origin is not None:
            return origin
        inside = [o for k, o in self._by_key.items() if k.startswith(key + ".")]
        if inside:
            return inside[-1]
        node: object = self._section
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return DEFAULT_ORIGIN
            node = node[part]
        return self.file
