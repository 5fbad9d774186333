"""The permission rules that apply to each working directory, loaded once and cached.

Layers, highest first: CLI rules; `<cwd>/.claude/settings.local.json`;
`<cwd>/.claude/settings.json`; `<config dir>/settings.json` (see `config.layers`). Invalid
rules are logged (file, rule, why) and skipped; the rest still apply. A settings file that
cannot be read at all is logged too, and the directory keeps the rules it had before (none
on first load): a typo in a settings file must never turn an ask into an allow, and without
rules every call is forwarded to the user. `reload()` (SIGHUP) makes the next lookup of every
directory read its files again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from betcode.config.errors import ConfigError
from betcode.config.layers import PermissionLists, load_permission_layers
from betcode.permissions.engine import RuleSet
from betcode.permissions.rules import InvalidRule

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedRules:
    ruleset: RuleSet
    invalid: tuple[InvalidRule, ...]
    error: ConfigError | None  # the file that could not be read (older rules kept)
    generation: int


class RuleBook:
    """Rule sets per working directory; `home` anchors `~/` patterns."""

    def __init__(
        self,
        config_dir: Path,
        cli_rules: PermissionLists | None = None,
        *,
        home: Path | None = None,
    ) -> None:
        self.config_dir = config_dir
        self.cli_rules = cli_rules
        self.home = home if home is not None else Path.home()
        self._generation = 0
        self._loaded: dict[str, LoadedRules] = {}

    async def ruleset_for(self, cwd: str) -> RuleSet:
        return (await self.rules_for(cwd)).ruleset

    async def rules_for(self, cwd: str) -> LoadedRules:
        """The rules for `cwd`, reading its settings files on first use or after reload()."""
        loaded = self._loaded.get(cwd)
        if loaded is not None and loaded.generation == self._generation:
            return loaded
        generation = self._generation
        fresh = await asyncio.to_thread(self._load, cwd, loaded, generation)
        if generation == self._generation:
            self._loaded[cwd] = fresh
        return fresh

    def reload(self) -> None:
        """Forget what was read: every directory reads its settings files again when next used."""
        self._generation += 1
        log.info("permission rules will be re-read from the settings files")

    def _load(self, cwd: str, previous: LoadedRules | None, generation: int) -> LoadedRules:
        try:
            layers = load_permission_layers(Path(cwd), self.config_dir, self.cli_rules)
        except ConfigError as error:
            kept = "keeping the rules read before" if previous else "no rules apply"
            log.error("permission rules for %s not loaded: %s; %s", cwd, error, kept)
            if previous is None:
                return LoadedRules(RuleSet(), (), error, generation)
            return dataclasses.replace(previous, error=error, generation=generation)
        ruleset, invalid = RuleSet.from_settings(layers)
        for problem in invalid:
            log.warning("%s", problem)
        log.info(
            "permission rules for %s: %d rules, %d invalid", cwd, len(ruleset.rules), len(invalid)
        )
        return LoadedRules(ruleset, tuple(invalid), None, generation)
