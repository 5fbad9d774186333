"""`betcode daemon start|stop|restart|status|logs`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from betcode import event_loop
from betcode.cli import service_cmd
from betcode.cli.config_cmd import offer_first_run_import
from betcode.cli.health import find_daemon, print_health
from betcode.cli.paths import DaemonPaths, resolve_paths
from betcode.config.dirs import config_dir
from betcode.config.errors import ConfigError
from betcode.config.layers import PermissionLists
from betcode.config.resolve import parse_override
from betcode.daemon_config import (
    EXIT_CONFIG_INVALID,
    PYTHON_LOG_LEVELS,
    DaemonConfig,
    load_daemon_config,
)
from betcode.observability.logs import LOG_FORMATS, configure_logging, render_line
from betcode.permissions.rule_check import rule_problems
from betcode.permissions.rules import InvalidRule, RuleList, RuleSource, parse_rule

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
RULE_HELP = (
    "A permission rule to {}, above every settings file (Claude Code syntax, e.g. "
    "'Bash(git status)'; repeatable)."
)


@click.group("daemon")
def daemon_group() -> None:
    """Start, stop and inspect the BetCode daemon."""


def _path_options(function: click.decorators.FC) -> click.decorators.FC:
    function = click.option(
        "--socket",
        "socket_path",
        type=click.Path(path_type=Path),
        help="Unix socket path (env BETCODE_SOCKET).",
    )(function)
    function = click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        help="Where daemon.db and logs live (env BETCODE_DATA_DIR).",
    )(function)
    return function


@daemon_group.command("start")
@_path_options
@click.option("--foreground", is_flag=True, help="Run in this terminal instead of detaching.")
@click.option(
    "--listen", metavar="HOST:PORT", help="Also listen on loopback TCP, e.g. 127.0.0.1:50051."
)
@click.option("--claude-bin", metavar="PATH", help="The claude binary (env BETCODE_CLAUDE_BIN).")
@click.option(
    "--http",
    metavar="HOST:PORT",
    help="Serve the web client there (setting http.listen); beyond loopback only with TLS.",
)
@click.option("--http-tls-cert", type=click.Path(), help="TLS certificate (PEM) for --http.")
@click.option("--http-tls-key", type=click.Path(), help="TLS private key (PEM) for --http.")
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (loopback only; "
    "sets daemon.observability.metrics_listen).",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    help="Log records as JSON lines or text (default: text on a terminal, else JSON).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A daemon setting, over settings.json and the environment, e.g. "
    "--set crash_policy.max_crashes=3 (repeatable; `betcode config show` lists the keys).",
)
@click.option(
    "--no-import",
    is_flag=True,
    help="On a first run, do not offer to copy Claude Code's settings (`betcode config import`).",
)
@click.option("--allow", "allow", multiple=True, metavar="RULE", help=RULE_HELP.format("allow"))
@click.option("--deny", "deny", multiple=True, metavar="RULE", help=RULE_HELP.format("deny"))
@click.option("--ask", "ask", multiple=True, metavar="RULE", help=RULE_HELP.format("ask"))
@click.option(
    "--relay",
    "relay_urls",
    multiple=True,
    metavar="URL",
    help="Dial out to this relay's daemon port (repeat for fallbacks; after `machine register`).",
)
@click.option(
    "--relay-custom-ca-cert",
    "relay_ca",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The relay's CA certificate (default: the one stored at `machine register`).",
)
def start(
    socket_path: Path | None,
    data_dir: Path | None,
    foreground: bool,
    listen: str | None,
    claude_bin: str | None,
    http: str | None,
    http_tls_cert: str | None,
    http_tls_key: str | None,
    metrics: str | None,
    log_format: str | None,
    settings: tuple[str, ...],
    no_import: bool,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    ask: tuple[str, ...],
    relay_urls: tuple[str, ...],
    relay_ca: Path | None,
) -> None:
    """Start the daemon (detached unless --foreground)."""
    settings += _http_settings(http, http_tls_cert, http_tls_key)
    paths = resolve_paths(socket_path, data_dir)
    if metrics:
        settings = (*settings, f"observability.metrics_listen={json.dumps(metrics)}")
    rules = _checked_rules(PermissionLists(allow, deny, ask))
    relay_urls, relay_ca = _relay_flags(relay_urls, relay_ca)
    config = replace(
        _load_config(paths, listen, claude_bin, settings, rules),
        relay_urls=relay_urls,
        relay_ca_file=relay_ca,
    )
    loop_name = _event_loop_name()
    for problem in rule_problems(Path.cwd(), config_dir()):
        click.echo(f"betcode daemon start: warning: {problem}", err=True)
    if not no_import:
        offer_first_run_import()
    if foreground:
        # Here only: the daemon's modules take ~0.5 s to import, which status and stop and a
        # detached start's own process never need.
        from betcode.daemon import run_daemon

        configure_logging(
            PYTHON_LOG_LEVELS[config.settings.log_level], log_format, environ=os.environ
        )
        sys.exit(event_loop.run(run_daemon(config), loop_name))
    running = find_daemon(paths.socket)
    if running is not None and running.answering:
        click.echo(f"daemon already running (pid {running.pid}, socket {paths.socket})")
        return
    relay_argv = [arg for url in relay_urls for arg in ("--relay", url)]
    if relay_ca is not None:
        relay_argv += ["--relay-custom-ca-cert", str(relay_ca)]
    _spawn_detached(paths, listen, claude_bin, settings, rules, log_format, relay_argv)


def _relay_flags(urls: tuple[str, ...], ca: Path | None) -> tuple[tuple[str, ...], Path | None]:
    """The command's --relay flags, else the global ones (`betcode --relay URL daemon start`)."""
    from betcode.cli.relay_login import global_options

    options = global_options()
    if not urls and options.get("relay"):
        urls = (str(options["relay"]),)
    if ca is None and options.get("relay_ca"):
        ca = Path(str(options["relay_ca"]))
    return urls, ca.absolute() if ca else None


def _http_settings(
    listen: str | None, tls_cert: str | None, tls_key: str | None
) -> tuple[str, ...]:
    """The --http flags are settings (`http.*`), checked and passed on like any --set."""
    named = {"http.listen": listen, "http.tls_cert": tls_cert, "http.tls_key": tls_key}
    return tuple(
        f"{key}={json.dumps(os.path.abspath(value) if key != 'http.listen' else value)}"
        for key, value in named.items()
        if value
    )


def _event_loop_name() -> str:
    try:
        return event_loop.chosen_event_loop()
    except event_loop.EventLoopUnavailable as error:
        click.echo(f"betcode daemon start: {error}", err=True)
        sys.exit(EXIT_CONFIG_INVALID)


def _checked_rules(rules: PermissionLists) -> PermissionLists:
    """The flags' rules, refused as a usage error when one cannot be used: a rule given on
    the command line is meant to apply, so it is not skipped the way a file's bad rule is."""
    for list_name in RuleList:
        for text in rules.get(list_name.value):
            try:
                parse_rule(text, RuleSource("--" + list_name.value, list_name))
            except InvalidRule as error:
                raise click.BadParameter(str(error), param_hint=f"--{list_name.value}") from None
    return rules


def _load_config(
    paths: DaemonPaths,
    listen: str | None,
    claude_bin: str | None,
    settings: tuple[str, ...],
    rules: PermissionLists,
) -> DaemonConfig:
    """Step one of the startup: settings files, environment and flags, all validated; an
    invalid value ends the command with the file, key, value and allowed range."""
    try:
        return load_daemon_config(
            data_dir=paths.data_dir,
            socket_path=paths.socket,
            config_dir=config_dir(),
            environ=os.environ,
            listen=listen,
            claude_bin=claude_bin,
            overrides=dict(parse_override(text) for text in settings),
            rules=rules,
        )
    except ConfigError as error:
        click.echo(f"betcode daemon start: {error}", err=True)
        sys.exit(EXIT_CONFIG_INVALID)


def foreground_argv(
    paths: DaemonPaths,
    listen: str | None,
    claude_bin: str | None,
    settings: tuple[str, ...],
    rules: PermissionLists,
    log_format: str | None = None,
) -> list[str]:
    """The command line of the daemon process itself, as a detached start or a service runs
    it: in the foreground, with the paths resolved now and the same flags."""
    argv = [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"]
    argv += ["--no-import", "--socket", str(paths.socket), "--data-dir", str(paths.data_dir)]
    if listen:
        argv += ["--listen", listen]
    if claude_bin:
        argv += ["--claude-bin", claude_bin]
    if log_format:
        argv += ["--log-format", log_format]
    for text in settings:
        argv += ["--set", text]
    for list_name in RuleList:
        for text in rules.get(list_name.value):
            argv += [f"--{list_name.value}", text]
    return argv


def _spawn_detached(
    paths: DaemonPaths,
    listen: str | None,
    claude_bin: str | None,
    settings: tuple[str, ...],
    rules: PermissionLists,
    log_format: str | None,
    extra_argv: list[str],
) -> None:
    paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = foreground_argv(paths, listen, claude_bin, settings, rules, log_format) + extra_argv
    with open(paths.log_file, "ab") as log_file:
        log_offset = log_file.tell()
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            # Its own exit code (65 config, 69 socket or data dir, 72/78 claude, 74 storage)
            # says why, and so does the error it logged.
            click.echo(
                f"Error: the daemon exited with code {code} during startup; see {paths.log_file}",
                err=True,
            )
            for line in _errors_logged_since(paths.log_file, log_offset):
                click.echo(f"  {line}", err=True)
            sys.exit(code)
        running = find_daemon(paths.socket)
        if running is not None and running.answering and running.pid == process.pid:
            click.echo(f"daemon started (pid {process.pid}, socket {paths.socket})")
            return
        time.sleep(0.1)
    raise click.ClickException(f"the daemon did not come up in time; see {paths.log_file}")


@daemon_group.command("stop")
@_path_options
@click.option(
    "--keep-sessions",
    is_flag=True,
    help="Leave every claude running under its holder (for an upgrade); the next daemon "
    "started on this data dir re-attaches them.",
)
def stop(socket_path: Path | None, data_dir: Path | None, keep_sessions: bool) -> None:
    """Stop the daemon serving the socket (SIGTERM: it stops its claude processes and
    flushes; with --keep-sessions SIGUSR2: it flushes and leaves them running)."""
    _stop(resolve_paths(socket_path, data_dir), keep_sessions)


def _stop(paths: DaemonPaths, keep_sessions: bool) -> None:
    running = find_daemon(paths.socket)
    if running is None:
        click.echo(f"daemon is not running (socket {paths.socket})")
        return
    if keep_sessions:
        from betcode.daemon import KEEP_SESSIONS_SIGNAL

        os.kill(running.pid, KEEP_SESSIONS_SIGNAL)
    else:
        os.kill(running.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not _pid_alive(running.pid):
            kept = ", sessions kept running" if keep_sessions else ""
            click.echo(f"daemon stopped (pid {running.pid}, socket {paths.socket}{kept})")
            return
        time.sleep(0.1)
    raise click.ClickException(
        f"daemon (pid {running.pid}) did not stop within {STOP_TIMEOUT_SECONDS}s"
    )


def _restart(**options: Any) -> None:
    """`stop --keep-sessions`, then `start` with these options: running turns go on."""
    _stop(resolve_paths(options["socket_path"], options["data_dir"]), keep_sessions=True)
    start_options = start.callback
    assert start_options is not None
    start_options(**options)


daemon_group.add_command(
    click.Command(
        "restart",
        callback=_restart,
        params=start.params,
        help="Restart the daemon keeping its sessions running (e.g. after an upgrade): "
        "`stop --keep-sessions`, then `start` with the options given here.",
    )
)


@daemon_group.command("status")
@_path_options
def status(socket_path: Path | None, data_dir: Path | None) -> None:
    """Show whether a daemon serves the socket, and the health of its parts."""
    paths = resolve_paths(socket_path, data_dir)
    running = find_daemon(paths.socket)
    if running is None:
        click.echo(f"daemon is not running (socket {paths.socket})")
        _print_rule_problems()
        sys.exit(1)
    if running.health is None:
        click.echo(
            f"daemon pid {running.pid} holds {paths.socket} but does not answer "
            "(starting, stopping or stuck)"
        )
        _print_rule_problems()
        sys.exit(1)
    where = running.health.metadata.get("data_dir", "unknown")
    click.echo(f"daemon running (pid {running.pid}, socket {paths.socket}, data dir {where})")
    print_health(running.health)
    _print_rule_problems()
    _print_e2e_fingerprint()


def _print_rule_problems() -> None:
    """The settings' permission rules that do not parse (here and in the user's files)."""
    for problem in rule_problems(Path.cwd(), config_dir()):
        click.echo(f"permission rule problem: {problem}")


def _print_e2e_fingerprint() -> None:
    """What a person compares with what a relayed client shows on first use (docs/RELAY.md)."""
    key_file = config_dir() / "certs" / "e2e.key"
    if not key_file.exists():
        return
    from betcode.remote.e2e import DaemonIdentity

    identity = DaemonIdentity.load_or_create(key_file)
    click.echo(f"end-to-end key fingerprint (relay clients): {identity.fingerprint}")


@daemon_group.command("install-service")
@_path_options
@click.option(
    "--listen", metavar="HOST:PORT", help="Also listen on loopback TCP, e.g. 127.0.0.1:50051."
)
@click.option("--claude-bin", metavar="PATH", help="The claude binary (env BETCODE_CLAUDE_BIN).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="As for `start`.")
@click.option("--allow", "allow", multiple=True, metavar="RULE", help=RULE_HELP.format("allow"))
@click.option("--deny", "deny", multiple=True, metavar="RULE", help=RULE_HELP.format("deny"))
@click.option("--ask", "ask", multiple=True, metavar="RULE", help=RULE_HELP.format("ask"))
@click.option("--uninstall", is_flag=True, help="Stop, disable and remove the service.")
@click.option("--no-enable", is_flag=True, help="Write the files only; do not enable or start.")
def install_service_command(
    socket_path: Path | None,
    data_dir: Path | None,
    listen: str | None,
    claude_bin: str | None,
    settings: tuple[str, ...],
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    ask: tuple[str, ...],
    uninstall: bool,
    no_enable: bool,
) -> None:
    """Run the daemon as a user service (systemd on Linux, launchd on macOS) that restarts on
    failure and keeps claude running across its own restarts."""
    if uninstall:
        sys.exit(service_cmd.uninstall(os.environ, config_dir()))
    paths = resolve_paths(socket_path, data_dir)
    rules = _checked_rules(PermissionLists(allow, deny, ask))
    # The same checks as `start`, so a unit that could never start is not written.
    _load_config(paths, listen, claude_bin, settings, rules)
    start_argv = foreground_argv(paths, listen, claude_bin, settings, rules)
    plan = service_cmd.service_plan(start_argv, paths, config_dir(), os.environ)
    sys.exit(service_cmd.install(plan, paths, os.environ, enable=not no_enable))


@daemon_group.command("logs")
@_path_options
@click.option("-n", "--lines", default=50, show_default=True, help="How many lines to show.")
@click.option("--json", "as_json", is_flag=True, help="The JSON records as they are stored.")
def logs(socket_path: Path | None, data_dir: Path | None, lines: int, as_json: bool) -> None:
    """Print the end of the daemon's log file (its JSON records as text lines)."""
    paths = resolve_paths(socket_path, data_dir)
    if not paths.log_file.exists():
        raise click.ClickException(f"no log file at {paths.log_file}")
    tail = paths.log_file.read_text(errors="replace").splitlines()[-lines:]
    click.echo("\n".join(tail if as_json else map(render_line, tail)))


def _errors_logged_since(log_file: Path, offset: int) -> list[str]:
    """The ERROR lines a failed start wrote to its log (so the user need not open it)."""
    with open(log_file, "rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
    return [message for line in lines if (message := _error_message(line))][-3:]


def _error_message(log_line: str) -> str | None:
    """The message of an ERROR line, whether the log is text or one JSON object a line."""
    if log_line.startswith("{"):
        with contextlib.suppress(ValueError):
            record = json.loads(log_line)
            if isinstance(record, dict) and str(record.get("level", "")).upper() == "ERROR":
                return str(record.get("message", log_line))
            return None
    return log_line if " ERROR " in log_line else None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie (exited, not yet reaped by its parent) does not."""
    stat_file = Path(f"/proc/{pid}/stat")
    if stat_file.parent.parent.joinpath("self").exists():  # Linux: the state is readable
        try:
            state = stat_file.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
