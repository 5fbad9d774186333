"""The worktree settings are daemon settings (`daemon.worktree.*`): defaults, values, the old
top-level `worktree` section, each bad value named with file, key, value and range (exit 65
before anything is made), `config show` with origins, and a ConfigService change taking effect
for the next worktree of a running daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from harness.daemon import InProcessDaemon
from harness.git_repos import make_repository

from betcode.cli.config_cmd import config_group
from betcode.config.errors import ConfigError
from betcode.config.resolve import load_daemon_settings, resolve_daemon_settings
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.v1 import (
    config_pb2,
    config_pb2_grpc,
    git_repo_pb2,
    git_repo_pb2_grpc,
    worktree_pb2,
    worktree_pb2_grpc,
)

WORKTREE = {
    "base_dir": "/srv/trees",
    "setup_commands": ["npm ci", "make"],
    "setup_timeout_secs": "30s",
    "min_free_bytes": 0,
}


def config_with(tmp_path: Path, settings: dict[str, object]) -> Path:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "settings.json").write_text(json.dumps(settings))
    return config


def test_defaults_without_a_section(tmp_path: Path) -> None:
    loaded = load_daemon_settings(tmp_path / "none", environ={}).worktree
    assert loaded.base_dir == ""  # the daemon places GLOBAL worktrees in <data dir>/worktrees
    assert loaded.setup_commands == ()
    assert loaded.setup_timeout_secs == 120
    assert loaded.min_free_bytes == 100 * 1024 * 1024


def test_values_are_read_from_daemon_worktree(tmp_path: Path) -> None:
    config = config_with(tmp_path, {"daemon": {"worktree": WORKTREE}})
    loaded = load_daemon_settings(config, environ={}).worktree
    assert loaded.base_dir == "/srv/trees"
    assert loaded.setup_commands == ("npm ci", "make")
    assert loaded.setup_timeout_secs == 30
    assert loaded.min_free_bytes == 0


def test_the_top_level_worktree_section_is_read_unless_daemon_worktree_exists(
    tmp_path: Path,
) -> None:
    config = config_with(tmp_path, {"worktree": WORKTREE})
    resolved = resolve_daemon_settings(config, environ={})
    assert resolved.settings.worktree.setup_commands == ("npm ci", "make")
    origin = resolved.value("daemon.worktree.setup_commands").origin
    assert origin == f"{config / 'settings.json'} (top-level worktree)"

    both = {"worktree": WORKTREE, "daemon": {"worktree": {"min_free_bytes": 7}}}
    winner = load_daemon_settings(config_with(tmp_path, both), environ={}).worktree
    assert (winner.min_free_bytes, winner.setup_commands) == (7, ())


@pytest.mark.parametrize(
    ("worktree", "key", "problem"),
    [
        ({"base_dir": "relative/path"}, "base_dir", '"relative/path" is not an absolute path'),
        ({"setup_commands": "npm ci"}, "setup_commands", '"npm ci" is not a list of non-empty'),
        ({"setup_commands": [""]}, "setup_commands", "is not a list of non-empty shell command"),
        ({"setup_timeout_secs": 0}, "setup_timeout_secs", "0 is out of range (allowed 1s to 1h)"),
        ({"setup_timeout_secs": True}, "setup_timeout_secs", "true is not a duration"),
        ({"min_free_bytes": -1}, "min_free_bytes", "-1 is out of range (allowed 0 to"),
        ({"min_free_bytes": 1.5}, "min_free_bytes", "1.5 is not a whole number"),
    ],
)
def test_a_bad_value_names_file_key_value_and_range(
    tmp_path: Path, worktree: dict[str, object], key: str, problem: str
) -> None:
    config = config_with(tmp_path, {"daemon": {"worktree": worktree}})
    with pytest.raises(ConfigError) as caught:
        load_daemon_settings(config, environ={})
    assert caught.value.key == f"daemon.worktree.{key}"
    assert str(caught.value).startswith(f"{config / 'settings.json'}: daemon.worktree.{key}: ")
    assert problem in str(caught.value)


def test_a_section_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_daemon_settings(config_with(tmp_path, {"worktree": []}), environ={})
    assert caught.value.key == "daemon.worktree"
    assert "(top-level worktree)" in str(caught.value)


def test_daemon_start_with_a_bad_worktree_setting_exits_65_before_anything_is_made(
    tmp_path: Path,
) -> None:
    path = config_with(tmp_path, {"daemon": {"worktree": {"setup_timeout_secs": 0}}})
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        # Never reached: the settings are checked before claude is looked for.
        "BETCODE_CLAUDE_BIN": str(tmp_path / "no-claude"),
        "BETCODE_SOCKET": str(tmp_path / "sock" / "daemon.sock"),
        "BETCODE_DATA_DIR": str(tmp_path / "data"),
        "BETCODE_CONFIG_DIR": str(path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_CONFIG_INVALID, done.stderr
    assert done.stderr.strip() == (
        f"betcode daemon start: {path / 'settings.json'}: daemon.worktree.setup_timeout_secs: "
        "0 is out of range (allowed 1s to 1h)"
    )
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "sock").exists()


def test_config_show_lists_the_worktree_settings_with_their_origins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_with(tmp_path, {"daemon": {"worktree": {"setup_commands": ["make"]}}})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(config))
    args = ["show", "--json", "--set", "worktree.min_free_bytes=0"]
    result = CliRunner().invoke(config_group, args)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["settings"]
    assert shown["daemon.worktree.setup_commands"] == {
        "value": ["make"],
        "origin": str(config / "settings.json"),
        "allowed": "a list of shell command lines",
    }
    assert shown["daemon.worktree.min_free_bytes"]["origin"] == "command line"
    assert shown["daemon.worktree.min_free_bytes"]["value"] == 0
    assert shown["daemon.worktree.setup_timeout_secs"] == {
        "value": 120.0,
        "origin": "default",
        "allowed": "allowed 1s to 1h",
    }
    assert shown["daemon.worktree.base_dir"]["origin"] == "default"


@pytest.fixture
async def channel(daemon: InProcessDaemon) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as opened:
        yield opened


def entry(key: str, value: object) -> config_pb2.SettingEntry:
    return config_pb2.SettingEntry(key=key, value_json=json.dumps(value))


async def test_a_config_service_change_applies_to_the_next_worktree(
    daemon: InProcessDaemon, channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    (tmp_path / "git").mkdir()
    _, repo = make_repository(tmp_path / "git")
    repos = git_repo_pb2_grpc.GitRepoServiceStub(channel)
    detail = await repos.RegisterRepo(git_repo_pb2.RegisterRepoRequest(repo_path=str(repo)))
    worktrees = worktree_pb2_grpc.WorktreeServiceStub(channel)
    before = await worktrees.CreateWorktree(
        worktree_pb2.CreateWorktreeRequest(name="before", repo_id=detail.id)
    )
    assert Path(before.path).is_relative_to(daemon.config.data_dir / "worktrees")
    assert before.setup_status == "none"

    config = config_pb2_grpc.ConfigServiceStub(channel)
    settings_file = daemon.config.config_dir / "settings.json"
    bad = config_pb2.Settings(entries=[entry("daemon.worktree.setup_timeout_secs", 0)])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await config.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=bad))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "daemon.worktree.setup_timeout_secs" in (refused.value.details() or "")
    assert not settings_file.exists()  # nothing written

    base = tmp_path / "elsewhere"
    change = config_pb2.Settings(
        entries=[
            entry("daemon.worktree.base_dir", str(base)),
            entry("daemon.worktree.setup_commands", ["touch configured-setup"]),
        ]
    )
    updated = await config.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=change))
    [commands] = [e for e in updated.entries if e.key == "daemon.worktree.setup_commands"]
    assert (commands.value_json, commands.origin) == (
        '["touch configured-setup"]',
        str(settings_file),
    )

    after = await worktrees.CreateWorktree(
        worktree_pb2.CreateWorktreeRequest(name="after", repo_id=detail.id)
    )
    assert Path(after.path) == base.resolve() / "project" / "after"
    assert after.setup_status == "succeeded"
    assert (Path(after.path) / "configured-setup").exists()
    assert (Path(before.path) / "README.md").exists()  # earlier worktrees stay where they are
