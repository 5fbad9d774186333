"""The `betcode` command: one click group; each sub-command lives in its own module."""

from __future__ import annotations

import click

from betcode import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="betcode")
def cli() -> None:
    """BetCode: run Claude Code sessions in a daemon and reach them from any terminal."""


from betcode.cli.chat_cmd import chat  # noqa: E402
from betcode.cli.config_cmd import config_group  # noqa: E402
from betcode.cli.daemon_cmd import daemon_group  # noqa: E402
from betcode.cli.demo_cmd import demo  # noqa: E402
from betcode.cli.doctor_cmd import doctor  # noqa: E402
from betcode.cli.ndjson_cmd import ndjson  # noqa: E402
from betcode.cli.permissions_cmd import permissions_group  # noqa: E402
from betcode.cli.run_cmd import run  # noqa: E402

cli.add_command(chat)
cli.add_command(config_group)
cli.add_command(daemon_group)
cli.add_command(run)
cli.add_command(demo)
cli.add_command(doctor)
cli.add_command(ndjson)
cli.add_command(permissions_group)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
