"""Every `betcode ... --help` fits a classic 80-column terminal: the blocks click prints as
written (exit codes, the plan format, keys) are wrapped by hand, so they are checked here."""

from __future__ import annotations

from collections.abc import Iterator

import click

from betcode.cli.main import cli

WIDTH = 80


def helps(command: click.Command, parent: click.Context | None = None) -> Iterator[str]:
    name = command.name or "betcode"
    context = click.Context(
        command, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH
    )
    yield command.get_help(context)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from helps(sub, context)


def test_every_help_fits_80_columns() -> None:
    too_wide = [line for text in helps(cli) for line in text.splitlines() if len(line) > WIDTH]
    assert too_wide == []


def test_daemon_start_names_every_value_the_same_way() -> None:
    """Addresses are HOST:PORT, files PATH: no option says only TEXT."""
    start = cli.commands["daemon"].commands["start"]  # type: ignore[attr-defined]
    text = next(helps(start))
    assert "TEXT" not in text
    assert "--listen HOST:PORT" in text
    assert "--http HOST:PORT" in text
    assert "--claude-bin PATH" in text
