"""The permission rules that apply to each working directory, loaded once and cached.

Layers, highest first: CLI rules; `<cwd>/.claude/settings.local.json`;
`<cwd>/.claude/settings.json`; `<config dir>/settings.json` (see `config.layers`). Invalid
rules are logged (file, rule, why) and skipped; the rest still apply. A settings file that
cannot be read at all is logged too, and the directory keeps the rules it had before (none
on first load): a typo in a settings file must never turn an ask into an allow, and without
rules every call is forwarded to the user. `reload()` (SIGHUP) makes the next lookup of every
directory read its files again.

A read that does not end (a settings file that is a FIFO nobody writes, a hung network mount)
counts as one that failed once it took `read_timeout` seconds: it is logged, and the calls
are decided with the rules read before (none on first load: the user is asked), so neither a
session's requests nor the daemon's startup wait for it. It goes on, alone, on a daemon thread
of its own (one per directory, never holding up the daemon's exit), and what it reads is used
from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from betcode.config.errors import ConfigError
from betcode.config.layers import PermissionLists, load_permission_layers
from betcode.permissions.engine import RuleSet
from betcode.permissions.rules import InvalidRule

log = logging.getLogger(__name__)

READ_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class LoadedRules:
    ruleset: RuleSet
    invalid: tuple[InvalidRule, ...]
    error: ConfigError | None  # the file that could not be read (older rules kept)
    generation: int


@dataclass(slots=True)
class _Reading:
    """One directory's settings files being read on a thread of its own."""

    result: asyncio.Future[LoadedRules]
    generation: int
    deadline: float  # time.monotonic() after which nobody waits for it
    overdue: bool = field(default=False)  # logged as not read in time


class RuleBook:
    """Rule sets per working directory; `home` anchors `~/` patterns."""

    def __init__(
        self,
        config_dir: Path,
        cli_rules: PermissionLists | None = None,
        *,
        home: Path | None = None,
        read_timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self.config_dir = config_dir
        self.cli_rules = cli_rules
        self.home = home if home is not None else Path.home()
        self.read_timeout = read_timeout
        self._generation = 0
        self._loaded: dict[str, LoadedRules] = {}
        self._reading: dict[str, _Reading] = {}

    async def ruleset_for(self, cwd: str) -> RuleSet:
        return (await self.rules_for(cwd)).ruleset

    async def rules_for(self, cwd: str) -> LoadedRules:
        """The rules for `cwd`, reading its settings files on first use or after reload(); if
        the read takes over `read_timeout` seconds, the rules read before (module doc)."""
        loaded = self._loaded.get(cwd)
        if loaded is not None and loaded.generation == self._generation:
            return loaded
        reading = self._reading.get(cwd)
        if reading is None or reading.generation != self._generation:
            reading = self._read(cwd, loaded)
        left = reading.deadline - time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.shield(reading.result), max(left, 0.0))
        except TimeoutError:
            return self._not_read_in_time(cwd, loaded, reading)

    def _read(self, cwd: str, previous: LoadedRules | None) -> _Reading:
        """Starts reading `cwd`'s settings files; kept once read if no reload() came first."""
        loop = asyncio.get_running_loop()
        generation = self._generation
        reading = _Reading(loop.create_future(), generation, time.monotonic() + self.read_timeout)
        self._reading[cwd] = reading

        def settle(fresh: LoadedRules | None, error: BaseException | None) -> None:
            if self._reading.get(cwd) is reading:
                del self._reading[cwd]
            if fresh is not None and generation == self._generation:
                self._loaded[cwd] = fresh
            if error is not None:
                reading.result.set_exception(error)
            elif fresh is not None:
                reading.result.set_result(fresh)

        def read() -> None:
            try:
                fresh, error = self._load(cwd, previous, generation), None
            except BaseException as failure:
                fresh, error = None, failure
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, fresh, error)

        # A daemon thread: a read that never ends must not keep the daemon from exiting. In
        # the caller's context, as asyncio.to_thread would: its log fields name the request.
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(read,), name=f"rules {cwd}", daemon=True).start()
        return reading

    def _not_read_in_time(
        self, cwd: str, previous: LoadedRules | None, reading: _Reading
    ) -> LoadedRules:
        if not reading.overdue:
            reading.overdue = True
            kept = "keeping the rules read before" if previous else "no rules apply until then"
            log.error(
                "permission rules for %s: its settings files were not read within %g s "
                "(one may be a FIFO or on a mount that hangs); still reading; %s",
                cwd,
                self.read_timeout,
                kept,
            )
        error = ConfigError(cwd, None, f"settings files not read within {self.read_timeout:g} s")
        if previous is None:
            return LoadedRules(RuleSet(), (), error, reading.generation)
        return dataclasses.replace(previous, error=error)

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
