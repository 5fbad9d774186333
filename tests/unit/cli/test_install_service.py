"""`betcode daemon install-service`: the systemd unit and launchd agent it writes, checked by
systemd's own verifier where it is installed, and the daemon started from the unit's own
command line and environment file."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.daemon import accepts_connections

from betcode.cli.paths import DaemonPaths
from betcode.cli.service_cmd import launchd_plist, service_plan
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.devtools.fake_claude import make_fake_claude

SECRET = 'sk-ant-test "quoted" \\ value'


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_SOCKET": str(tmp_path / "daemon.sock"),
        "BETCODE_CLAUDE_BIN": str(make_fake_claude(tmp_path / "fake", {})),
        "ANTHROPIC_API_KEY": SECRET,
        "UNRELATED_VARIABLE": "not for claude",
    }


def betcode(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def unit_values(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


def read_env_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile syntax as we write it: KEY="value" with \\ and \" escaped."""
    values = {}
    for line in path.read_text().splitlines():
        name, quoted = line.split("=", 1)
        values[name] = shlex.split(quoted)[0]
    return values


@pytest.fixture
def installed(tmp_path: Path) -> tuple[dict[str, str], str, Path]:
    env = environment(tmp_path)
    done = betcode(env, "daemon", "install-service", "--no-enable", "--set", "log_level=debug")
    assert done.returncode == 0, done.stderr
    unit_file = tmp_path / "xdg" / "systemd" / "user" / "betcode.service"
    return env, unit_file.read_text(), unit_file


def test_the_unit_runs_the_foreground_daemon_and_keeps_sessions_on_stop(
    tmp_path: Path, installed: tuple[dict[str, str], str, Path]
) -> None:
    _env, unit, unit_file = installed
    (start,) = unit_values(unit, "ExecStart")
    assert shlex.split(start)[1:] == [
        *("-m", "betcode.cli.main", "daemon", "start", "--foreground", "--no-import"),
        *("--socket", str(tmp_path / "daemon.sock"), "--data-dir", str(tmp_path / "data")),
        *("--set", "log_level=debug"),
    ]
    (stop,) = unit_values(unit, "ExecStop")
    assert shlex.split(stop)[3:6] == ["daemon", "stop", "--keep-sessions"]
    assert unit_values(unit, "KillMode") == ["process"]  # systemd leaves the holders alone
    assert unit_values(unit, "Restart") == ["on-failure"]
    assert unit_values(unit, "RestartPreventExitStatus") == ["65 69 72 74 78"]
    assert unit_values(unit, "WantedBy") == ["default.target"]
    assert SECRET not in unit
    assert stat.S_IMODE(unit_file.stat().st_mode) == 0o600


def test_the_environment_file_is_private_and_holds_what_claude_needs(
    tmp_path: Path, installed: tuple[dict[str, str], str, Path]
) -> None:
    _env, unit, _unit_file = installed
    (env_file,) = unit_values(unit, "EnvironmentFile")
    path = Path(env_file)
    assert path == tmp_path / "config" / "service.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    values = read_env_file(path)
    assert values["ANTHROPIC_API_KEY"] == SECRET
    assert values["BETCODE_CONFIG_DIR"] == str(tmp_path / "config")
    assert values["PATH"] == os.environ.get("PATH", "/usr/bin:/bin")
    assert "UNRELATED_VARIABLE" not in values
    assert "HOME" not in values  # the service manager sets the user's own


def test_systemd_accepts_the_unit(installed: tuple[dict[str, str], str, Path]) -> None:
    verifier = shutil.which("systemd-analyze")
    if verifier is None:
        pytest.skip(
            "systemd-analyze is not installed (Debian package `systemd`): unit not verified"
        )
    _env, _unit, unit_file = installed
    done = subprocess.run(
        [verifier, "verify", str(unit_file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert unit_file.name not in done.stderr, done.stderr  # no warning about our unit


def test_the_daemon_starts_and_stops_with_the_units_commands_and_environment(
    tmp_path: Path, installed: tuple[dict[str, str], str, Path]
) -> None:
    _env, unit, _unit_file = installed
    (start,) = unit_values(unit, "ExecStart")
    (stop,) = unit_values(unit, "ExecStop")
    (env_file,) = unit_values(unit, "EnvironmentFile")
    service_env = {"HOME": str(tmp_path / "home"), **read_env_file(Path(env_file))}
    with open(tmp_path / "service.log", "wb") as log:
        daemon = subprocess.Popen(shlex.split(start), env=service_env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not accepts_connections(tmp_path / "daemon.sock"):
            assert daemon.poll() is None, (tmp_path / "service.log").read_text()
            assert time.monotonic() < deadline, "the daemon did not come up"
            time.sleep(0.05)
        status = betcode(service_env, "daemon", "status")
        assert f"daemon running (pid {daemon.pid}" in status.stdout
        # What systemd runs on `systemctl --user stop|restart betcode` (the keep-sessions stop).
        stopped = subprocess.run(
            shlex.split(stop), env=service_env, capture_output=True, text=True, timeout=60
        )
        assert stopped.returncode == 0, stopped.stderr
        assert daemon.wait(20) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(20)


def test_a_bad_setting_writes_nothing(tmp_path: Path) -> None:
    env = environment(tmp_path)
    done = betcode(env, "daemon", "install-service", "--no-enable", "--set", "max_sessions=0")
    assert done.returncode == EXIT_CONFIG_INVALID
    assert "daemon.max_sessions" in done.stderr
    assert not (tmp_path / "xdg").exists()
    assert not (tmp_path / "config" / "service.env").exists()


def test_uninstall_removes_the_unit_and_its_environment(
    tmp_path: Path, installed: tuple[dict[str, str], str, Path]
) -> None:
    env, _unit, unit_file = installed
    done = betcode(env, "daemon", "install-service", "--uninstall")
    assert not unit_file.exists()
    assert not (tmp_path / "config" / "service.env").exists()
    assert f"removed {unit_file}" in done.stdout
    again = betcode(env, "daemon", "install-service", "--uninstall")
    assert again.returncode == 0
    assert "no service installed" in again.stdout


def test_the_launchd_agent_runs_the_same_command(tmp_path: Path) -> None:
    paths = DaemonPaths(tmp_path / "daemon.sock", tmp_path / "data")
    start = [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"]
    plan = service_plan(start, paths, tmp_path / "config", {"ANTHROPIC_API_KEY": "k", "X": "y"})
    agent = plistlib.loads(launchd_plist(plan))
    assert agent["ProgramArguments"] == start
    assert agent["EnvironmentVariables"] == {
        "ANTHROPIC_API_KEY": "k",
        "BETCODE_CONFIG_DIR": str(tmp_path / "config"),
    }
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["AbandonProcessGroup"] is True  # claude's holders outlive the daemon
    assert agent["StandardErrorPath"] == str(tmp_path / "data" / "daemon.log")
