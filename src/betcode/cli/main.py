"""The `betcode` command: one click group; each sub-command lives in its own module."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from click.shell_completion import get_completion_class

from betcode import __version__
from betcode.cli.exit_codes import ExitCode

PROG_NAME = "betcode"
COMPLETE_VAR = "_BETCODE_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


class BetcodeGroup(click.Group):
    """Exits with DIGEST §11.4's codes: a usage error is 5 (click's own 2 means "connection
    failure" there)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        prog_name = prog_name or PROG_NAME
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as error:
            error.show()
            sys.exit(ExitCode.INVALID_ARGUMENTS)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(ExitCode.AGENT_ERROR)
        sys.exit(result if isinstance(result, int) else ExitCode.OK)


@click.group(PROG_NAME, cls=BetcodeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name=PROG_NAME)
def cli() -> None:
    """BetCode: run Claude Code sessions in a daemon and reach them from any terminal."""


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(betcode completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(betcode completion zsh)"    (in ~/.zshrc)
    fish:  betcode completion fish > ~/.config/fish/completions/betcode.fish
    """
    completer = get_completion_class(shell)
    if completer is None:  # click knows every shell of SHELLS; this guards a future click
        raise click.UsageError(f"click has no completion for {shell}")
    click.echo(completer(cli, {}, PROG_NAME, COMPLETE_VAR).source())


from betcode.cli.chat_cmd import chat  # noqa: E402
from betcode.cli.config_cmd import config_group  # noqa: E402
from betcode.cli.daemon_cmd import daemon_group  # noqa: E402
from betcode.cli.demo_cmd import demo  # noqa: E402
from betcode.cli.doctor_cmd import doctor  # noqa: E402
from betcode.cli.ndjson_cmd import ndjson  # noqa: E402
from betcode.cli.permissions_cmd import permissions_group  # noqa: E402
from betcode.cli.run_cmd import run  # noqa: E402
from betcode.cli.sessions_cmd import sessions_group  # noqa: E402

cli.add_command(chat)
cli.add_command(config_group)
cli.add_command(daemon_group)
cli.add_command(run)
cli.add_command(demo)
cli.add_command(doctor)
cli.add_command(ndjson)
cli.add_command(permissions_group)
cli.add_command(sessions_group)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
