"""First run: copy Claude Code's user settings and rules into BetCode's config dir.

Only `~/.claude/settings.json` and `~/.claude/rules/` are read, and they are copied, never
linked, so each tool can later change its own copy. `~/.claude.json` (claude's login) is never
opened. Nothing that already exists in the config dir is overwritten, and a settings file that
is not valid JSON is reported and left behind rather than copied into a config the daemon would
then refuse to load.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from betcode.config.errors import ConfigError
from betcode.config.layers import SETTINGS_FILE, read_settings_file

RULES_DIR = "rules"


@dataclass(frozen=True, slots=True)
class PlannedCopy:
    source: Path
    target: Path


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What an import would copy, and what it leaves out and why."""

    copies: tuple[PlannedCopy, ...]
    skipped: tuple[tuple[Path, str], ...]


def default_claude_home() -> Path:
    return Path.home() / ".claude"


def is_first_run(config_dir: Path) -> bool:
    """True while BetCode's config dir does not exist: the moment to offer an import."""
    return not config_dir.exists()


def plan_import(config_dir: Path, claude_home: Path | None = None) -> ImportPlan:
    """Decide what to copy from `claude_home` (default ~/.claude) into `config_dir`."""
    home = claude_home or default_claude_home()
    copies: list[PlannedCopy] = []
    skipped: list[tuple[Path, str]] = []
    settings = home / SETTINGS_FILE
    if settings.is_file():
        reason = _settings_problem(settings, config_dir / SETTINGS_FILE)
        if reason is None:
            copies.append(PlannedCopy(settings, config_dir / SETTINGS_FILE))
        else:
            skipped.append((settings, reason))
    rules = home / RULES_DIR
    if rules.is_dir():
        for source in sorted(p for p in rules.rglob("*") if p.is_file()):
            target = config_dir / RULES_DIR / source.relative_to(rules)
            if target.exists():
                skipped.append((source, f"{target} already exists"))
            else:
                copies.append(PlannedCopy(source, target))
    return ImportPlan(tuple(copies), tuple(skipped))


def apply_import(plan: ImportPlan) -> list[Path]:
    """Copy the planned files (contents, not links); returns the files created."""
    created: list[Path] = []
    for copy in plan.copies:
        copy.target.parent.mkdir(parents=True, exist_ok=True)
        # copyfile follows a symlinked source and writes a regular file.
        shutil.copyfile(copy.source, copy.target)
        created.append(copy.target)
    return created


def _settings_problem(source: Path, target: Path) -> str | None:
    if target.exists():
        return f"{target} already exists"
    try:
        read_settings_file(source)
    except ConfigError as error:
        return f"not copied: {error.problem}"
    return None
