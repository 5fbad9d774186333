"""`betcode config show` and `betcode config import`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from betcode.config.dirs import config_dir
from betcode.config.errors import ConfigError
from betcode.config.importer import ImportPlan, apply_import, is_first_run, plan_import
from betcode.config.keys import display_value
from betcode.config.layers import load_permission_layers
from betcode.config.origins import DEFAULT_ORIGIN
from betcode.config.resolve import (
    ResolvedSettings,
    SettingValue,
    parse_override,
    resolve_daemon_settings,
)
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.permissions.engine import RuleSet
from betcode.permissions.rule_check import rule_problems
from betcode.permissions.rules import InvalidRule

VALUE_COLUMN_MAX = 24


@click.group("config")
def config_group() -> None:
    """Show BetCode's effective configuration, or import Claude Code's."""


@config_group.command("show")
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Working directory whose .claude/ settings apply (default: the current one).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Show the settings as `betcode daemon start --set KEY=VALUE` would use them (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
def show(cwd: Path | None, settings: tuple[str, ...], as_json: bool) -> None:
    """Effective daemon settings, and every permission rule, each with where it came from."""
    directory = config_dir()
    workdir = (cwd or Path.cwd()).absolute()
    try:
        overrides = dict(parse_override(text) for text in settings)
        resolved = resolve_daemon_settings(directory, overrides)
        ruleset, invalid = RuleSet.from_settings(load_permission_layers(workdir, directory))
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps(_as_json(directory, resolved, ruleset, invalid), indent=2))
    else:
        _print_text(directory, workdir, resolved, ruleset, invalid)


def _print_text(
    directory: Path,
    workdir: Path,
    resolved: ResolvedSettings,
    ruleset: RuleSet,
    invalid: list[InvalidRule],
) -> None:
    state = "" if directory.exists() else " (does not exist yet: see `betcode config import`)"
    click.echo(f"Config dir: {directory}{state}\n")
    click.echo("Daemon settings (--set wins over the environment, which wins over the file):")
    _print_settings(resolved.values)
    click.echo(f"\nPermission rules for {workdir} (checked deny, then ask, then allow):")
    if not ruleset.rules:
        click.echo("  (none)")
    for rule in ruleset.rules:
        click.echo(f"  {rule.source.list_name:<5}  {rule.text}  ({rule.source.origin})")
    if invalid:
        click.echo("\nInvalid rules (skipped):")
        for error in invalid:
            click.echo(f"  {error}")
    if resolved.unknown:
        click.echo("\nUnknown settings (ignored):")
        for unknown in resolved.unknown:
            click.echo(f"  {unknown}")


def _print_settings(values: Sequence[SettingValue]) -> None:
    """Columns: the setting, its value, where the value came from (defaults dimmed)."""
    rows = [("SETTING", "VALUE", "FROM")]
    rows += [(v.key, display_value(v.key, v.value), v.origin) for v in values]
    key_width = max(len(key) for key, _, _ in rows)
    # A long value (a notify command) pushes its own origin right rather than every row's.
    value_width = max(len(value) for _, value, _ in rows if len(value) <= VALUE_COLUMN_MAX)
    for key, value, origin in rows:
        line = f"  {key:<{key_width}}  {value:<{value_width}}  {origin}"
        click.echo(click.style(line, dim=True) if origin == DEFAULT_ORIGIN else line)


def _as_json(
    directory: Path, resolved: ResolvedSettings, ruleset: RuleSet, invalid: list[InvalidRule]
) -> dict[str, object]:
    return {
        "config_dir": str(directory),
        "settings": {
            v.key: {"value": v.value, "origin": v.origin, "allowed": v.allowed}
            for v in resolved.values
        },
        "rules": [
            {"list": str(r.source.list_name), "rule": r.text, "origin": r.source.origin}
            for r in ruleset.rules
        ],
        "unknown_settings": [
            {"key": u.key, "origin": u.origin, "closest": u.closest} for u in resolved.unknown
        ],
        "invalid_rules": [
            {"list": str(e.source.list_name), "rule": e.text, "origin": e.source.origin,
             "reason": e.reason}
            for e in invalid
        ],
    }  # fmt: skip


@config_group.command("check")
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Working directory whose .claude/ settings apply (default: the current one).",
)
def check(cwd: Path | None) -> None:
    """Check the daemon settings and every permission rule; exit 65 if one cannot be used or a
    setting is unknown (misspelt)."""
    directory = config_dir()
    problems = rule_problems((cwd or Path.cwd()).absolute(), directory)
    try:
        problems += [str(unknown) for unknown in resolve_daemon_settings(directory, {}).unknown]
    except ConfigError as error:
        if str(error) not in problems:  # settings.json holds rules too: said once
            problems.insert(0, str(error))
    if not problems:
        click.echo(
            "configuration OK: every setting is known and valid and every permission rule parses"
        )
        return
    for problem in problems:
        click.echo(problem, err=True)
    sys.exit(EXIT_CONFIG_INVALID)


@config_group.command("import")
@click.option("--yes", "-y", is_flag=True, help="Copy without asking.")
@click.option(
    "--from",
    "claude_home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Claude Code's user directory to copy from (default: ~/.claude).",
)
def import_settings(yes: bool, claude_home: Path | None) -> None:
    """Copy ~/.claude/settings.json and ~/.claude/rules/ into BetCode's config dir."""
    directory = config_dir()
    plan = plan_import(directory, claude_home)
    if not _describe(plan, directory):
        return
    if not yes and not click.confirm("Copy these files?", default=True):
        click.echo("Nothing copied.")
        return
    _apply(plan)


def offer_first_run_import() -> None:
    """For `betcode daemon start`: when the config dir does not exist yet, offer the import
    on a terminal, then create the dir so the question is asked only once."""
    directory = config_dir()
    if not is_first_run(directory):
        return
    plan = plan_import(directory)
    interactive = sys.stdin.isatty()
    if plan.copies and interactive:
        click.echo("First run: BetCode can start from a copy of your Claude Code settings.")
        if _describe(plan, directory) and click.confirm("Copy these files?", default=True):
            _apply(plan)
    elif plan.copies:
        click.echo(
            f"First run: `betcode config import` copies Claude Code's settings to {directory}."
        )
    directory.mkdir(parents=True, exist_ok=True)


def _describe(plan: ImportPlan, directory: Path) -> bool:
    """Print the plan; False when there is nothing to copy."""
    for path, reason in plan.skipped:
        click.echo(f"Skipping {path}: {reason}")
    if not plan.copies:
        click.echo("Nothing to import.")
        return False
    click.echo(f"Will copy into {directory}:")
    for planned in plan.copies:
        click.echo(f"  {planned.source} -> {planned.target}")
    return True


def _apply(plan: ImportPlan) -> None:
    created = apply_import(plan)
    click.echo(f"Copied {len(created)} file(s); the originals were not changed.")
