"""`betcode doctor`: which claude BetCode would run, whether it is compatible, where files live,
which event loop the daemon would run on."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click

from betcode import event_loop
from betcode.claude.locate import ClaudeNotFound, find_claude_binary
from betcode.cli.health import find_daemon
from betcode.cli.paths import resolve_paths
from betcode.config.dirs import config_dir
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.permissions.rule_check import rule_problems
from betcode.protocol.version import probe_claude_version
from betcode.tunnel.identity import MachineIdentity


@click.command("doctor")
@click.option("--claude-bin", help="Check this claude binary instead of the usual lookup.")
def doctor(claude_bin: str | None) -> None:
    """Show the claude CLI (path, version, compatibility) and BetCode's directories."""
    paths = resolve_paths()
    click.echo(f"config dir:  {config_dir()}")
    click.echo(f"data dir:    {paths.data_dir}")
    click.echo(f"socket:      {paths.socket}")
    problems = rule_problems(Path.cwd(), config_dir())
    if problems:
        click.echo(
            f"rules:       {len(problems)} PROBLEM(S) — skipped rules allow and deny nothing"
        )
    else:
        click.echo("rules:       every permission rule that applies here parses")
    for problem in problems:
        click.echo(f"  {problem}")
    _relay_lines(paths.socket)
    loop_problem = None
    try:
        click.echo(f"event loop:  {event_loop.chosen_event_loop()} (the daemon's)")
    except event_loop.EventLoopUnavailable as error:
        loop_problem = error
        click.echo(f"event loop:  UNUSABLE — {error}")
    try:
        binary = find_claude_binary(claude_bin, os.environ)
    except ClaudeNotFound as error:
        click.echo(f"claude:      NOT FOUND — {error}")
        sys.exit(72)
    click.echo(f"claude:      {binary.path} (found via {binary.source})")
    probe = asyncio.run(probe_claude_version(str(binary.path)))
    version = str(probe.version) if probe.version is not None else "unknown"
    click.echo(f"version:     {version}")
    click.echo(f"level:       {probe.level.name} — {probe.message}")
    if probe.exit_code is not None:
        sys.exit(probe.exit_code)
    if loop_problem is not None:
        sys.exit(EXIT_CONFIG_INVALID)  # what `daemon start` would exit with


def _relay_lines(socket: Path) -> None:
    """Whether this machine is registered with a relay, and its daemon's tunnel (relay,
    connected since, last error) when a daemon runs."""
    identity = MachineIdentity(config_dir() / "certs")
    if not identity.info_file.exists():
        click.echo("relay:       this machine is not registered with a relay")
        return
    click.echo(f"relay:       registered as machine {identity.machine_id()}")
    running = find_daemon(socket)
    components = running.health.components if running and running.health else ()
    tunnel = next((c.message for c in components if c.name == "relay_tunnel"), None)
    click.echo(f"  tunnel: {tunnel or 'no running daemon dials a relay'}")
