"""The `betcode` group with every sub-command loaded, for the command reference the docs site
generates from the commands themselves (docs/CLI_REFERENCE.md, built by mkdocs-click). The group
the command runs loads each sub-command only when it is used."""

from __future__ import annotations

import click

from betcode.cli.main import cli


def loaded(group: click.Group) -> click.Group:
    context = click.Context(group, info_name=group.name)
    commands = {name: group.get_command(context, name) for name in group.list_commands(context)}
    return click.Group(
        group.name,
        commands={name: command for name, command in commands.items() if command is not None},
        params=group.params,
        help=group.help,
    )


betcode = loaded(cli)
