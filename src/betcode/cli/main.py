"""The `betcode` command: one click group; each sub-command lives in its own module."""

from __future__ import annotations

import importlib
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

# Sub-commands are imported when used: every Tab press of shell completion runs `betcode`, and
# the chat's Textual app alone takes ~0.15-0.4 s to import.
LAZY_COMMANDS = {
    "auth": ("betcode.cli.auth_cmd", "auth_group"),
    "chat": ("betcode.cli.chat_cmd", "chat"),
    "config": ("betcode.cli.config_cmd", "config_group"),
    "daemon": ("betcode.cli.daemon_cmd", "daemon_group"),
    "demo": ("betcode.cli.demo_cmd", "demo"),
    "doctor": ("betcode.cli.doctor_cmd", "doctor"),
    "machine": ("betcode.cli.machine_cmd", "machine_group"),
    "ndjson": ("betcode.cli.ndjson_cmd", "ndjson"),
    "orchestrate": ("betcode.cli.plan_cmd", "orchestrate"),
    "permissions": ("betcode.cli.permissions_cmd", "permissions_group"),
    "relay": ("betcode.cli.relay_cmd", "relay_group"),
    "repo": ("betcode.cli.repo_cmd", "repo_group"),
    "run": ("betcode.cli.run_cmd", "run"),
    "sessions": ("betcode.cli.sessions_cmd", "sessions_group"),
    "subagent": ("betcode.cli.subagent_cmd", "subagent_group"),
    "top": ("betcode.cli.top_cmd", "top"),
    "web": ("betcode.cli.web_cmd", "web_group"),
    "worktree": ("betcode.cli.worktree_cmd", "worktree_group"),
}


class BetcodeGroup(click.Group):
    """Loads LAZY_COMMANDS on first use, and exits with the codes of docs/CLI.md#exit-codes: a usage
    error is 5 (click's own 2 means "connection failure" there)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module_name, attribute = LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module_name), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

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
@click.option(
    "--relay", metavar="URL", help="Reach daemons through this relay (https://host:port)."
)
@click.option(
    "--relay-custom-ca-cert",
    "relay_ca",
    metavar="PEM",
    type=click.Path(exists=True, dir_okay=False),
    help="The relay's CA certificate (`betcode relay init` prints where it is).",
)
@click.option("--machine", metavar="ID", help="The machine whose daemon to use (via the relay).")
@click.pass_context
def cli(ctx: click.Context, relay: str | None, relay_ca: str | None, machine: str | None) -> None:
    """BetCode: run Claude Code sessions in a daemon and reach them from any terminal."""
    ctx.obj = {"relay": relay, "relay_ca": relay_ca, "machine": machine}


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


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
