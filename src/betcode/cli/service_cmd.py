"""`betcode daemon install-service [--uninstall]`: run the daemon as a user service.

Linux gets a systemd user unit, macOS a launchd agent. Both run `daemon start --foreground`
with this command's paths and flags, restart it when it fails (not on a startup refusal such
as a bad setting: restarting would only fail again), and leave the session holders running
when the daemon stops. With systemd that is `KillMode=process` plus a keep-sessions
`ExecStop`, so `systemctl --user restart betcode` during a turn loses nothing.

The environment claude needs (its API key, cloud credentials, proxies, PATH to find `claude`
and `node`) is captured now into a 0600 file beside the unit's settings, never into the unit
itself, which other local users may read.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from betcode.claude.environment import is_allowed
from betcode.cli.health import find_daemon
from betcode.cli.paths import DaemonPaths

UNIT_NAME = "betcode.service"
LAUNCHD_LABEL = "dev.betcode.daemon"
ENV_FILE_NAME = "service.env"
# Startup refusals (daemon_config / composition.startup_checks exit codes): restarting cannot
# fix them.
NO_RESTART_EXIT_CODES = (65, 69, 72, 74, 78)
# Set by the user's login session, or by the service manager itself.
_SESSION_NAMES = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "SSH_AUTH_SOCK"}
)


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """What the service runs: the start and stop command lines and the environment."""

    start_argv: list[str]
    stop_argv: list[str]
    environment: dict[str, str]
    env_file: Path
    log_file: Path


def service_plan(
    start_argv: list[str], paths: DaemonPaths, config_dir: Path, environ: Mapping[str, str]
) -> ServicePlan:
    """``start_argv`` is the daemon's own command line (`daemon_cmd.foreground_argv`)."""
    betcode = start_argv[: start_argv.index("daemon")]
    where = ["--socket", str(paths.socket), "--data-dir", str(paths.data_dir)]
    environment = {
        name: value
        for name, value in environ.items()
        if (is_allowed(name) or name.startswith("BETCODE_"))
        and name not in _SESSION_NAMES
        and "\n" not in value
    }
    environment["BETCODE_CONFIG_DIR"] = str(config_dir)
    return ServicePlan(
        start_argv=start_argv,
        stop_argv=[*betcode, "daemon", "stop", "--keep-sessions", *where],
        environment=environment,
        env_file=config_dir / ENV_FILE_NAME,
        log_file=paths.log_file,
    )


def systemd_unit(plan: ServicePlan) -> str:
    return "\n".join(
        [
            "[Unit]",
            "Description=BetCode daemon (Claude Code sessions over gRPC)",
            "",
            "[Service]",
            "Type=exec",
            f"EnvironmentFile={_systemd_arg(str(plan.env_file))}",
            f"ExecStart={_systemd_command(plan.start_argv)}",
            # Stops the daemon, not the claude holders; KillMode=process keeps systemd from
            # killing them afterwards (they live in this unit's cgroup).
            f"ExecStop={_systemd_command(plan.stop_argv)}",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "KillMode=process",
            "TimeoutStopSec=30",
            "Restart=on-failure",
            "RestartSec=2",
            f"RestartPreventExitStatus={' '.join(map(str, NO_RESTART_EXIT_CODES))}",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def systemd_env_file(environment: Mapping[str, str]) -> str:
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "".join(f"{name}={quoted(value)}\n" for name, value in sorted(environment.items()))


def launchd_plist(plan: ServicePlan) -> bytes:
    return plistlib.dumps(
        {
            "Label": LAUNCHD_LABEL,
            "ProgramArguments": plan.start_argv,
            "EnvironmentVariables": plan.environment,
            "RunAtLoad": True,
            "KeepAlive": {"SuccessfulExit": False},
            # launchd would otherwise kill the whole process group, holders included.
            "AbandonProcessGroup": True,
            "StandardOutPath": str(plan.log_file),
            "StandardErrorPath": str(plan.log_file),
        }
    )


def _systemd_arg(text: str) -> str:
    escaped = text.replace("%", "%%")  # systemd specifiers
    if escaped and all(c.isalnum() or c in "/._-+=:,@" for c in escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd_command(argv: list[str]) -> str:
    return " ".join(_systemd_arg(arg) for arg in argv)


def unit_path(environ: Mapping[str, str]) -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    xdg = environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "systemd" / "user" / UNIT_NAME


def write_private(path: Path, content: bytes) -> None:
    """Writes ``content`` to ``path`` (0600) through a temporary file, so a reader never sees
    half a file and the secret-bearing content is never readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(content)
    os.replace(temporary, path)


def install(plan: ServicePlan, paths: DaemonPaths, environ: Mapping[str, str], enable: bool) -> int:
    target = unit_path(environ)
    if sys.platform == "darwin":
        write_private(target, launchd_plist(plan))
        click.echo(f"wrote {target}")
        return _run_manager(["launchctl", "load", "-w", str(target)], enable)
    write_private(plan.env_file, systemd_env_file(plan.environment).encode())
    write_private(target, systemd_unit(plan).encode())
    click.echo(f"wrote {target} (environment in {plan.env_file})")
    code = _run_manager(["systemctl", "--user", "daemon-reload"], enable)
    if code or not enable:
        return code
    running = find_daemon(paths.socket)
    if running is not None:
        click.echo(
            f"a daemon already serves {paths.socket} (pid {running.pid}): the service is "
            "enabled for the next login; to move to it now, run `betcode daemon stop "
            "--keep-sessions` then `systemctl --user start betcode`"
        )
        return _run_manager(["systemctl", "--user", "enable", UNIT_NAME], enable)
    return _run_manager(["systemctl", "--user", "enable", "--now", UNIT_NAME], enable)


def uninstall(environ: Mapping[str, str], config_dir: Path) -> int:
    target = unit_path(environ)
    if not target.exists():
        click.echo(f"no service installed ({target} does not exist)")
        return 0
    if sys.platform == "darwin":
        code = _run_manager(["launchctl", "unload", "-w", str(target)], True)
    else:
        code = _run_manager(["systemctl", "--user", "disable", "--now", UNIT_NAME], True)
        (config_dir / ENV_FILE_NAME).unlink(missing_ok=True)
    target.unlink()
    if sys.platform != "darwin":
        code = _run_manager(["systemctl", "--user", "daemon-reload"], True) or code
    click.echo(f"removed {target}")
    return code


def _run_manager(argv: list[str], enable: bool) -> int:
    """Runs the service manager; a missing one or a failure says what to run by hand."""
    if not enable:
        return 0
    if shutil.which(argv[0]) is None:
        click.echo(f"{argv[0]} is not available here; run this where it is: {shlex.join(argv)}")
        return 1
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip()
        click.echo(f"`{shlex.join(argv)}` failed: {reason}", err=True)
        return 1
    return 0
