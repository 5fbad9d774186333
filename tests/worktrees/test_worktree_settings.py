"""The `worktree` section of settings.json: defaults, values, and each bad value named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from betcode.config.errors import ConfigError
from betcode.daemon import Daemon, DaemonConfig, DaemonStartupError
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.worktrees import load_worktree_settings


def settings_with(tmp_path: Path, section: object) -> Path:
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.json").write_text(json.dumps({"worktree": section}))
    return config


def test_defaults_without_a_section(tmp_path: Path) -> None:
    loaded = load_worktree_settings(tmp_path / "none", tmp_path / "data")
    assert loaded.base_dir == tmp_path / "data" / "worktrees"
    assert loaded.setup_commands == ()
    assert loaded.setup_timeout_secs == 120


def test_values_are_read(tmp_path: Path) -> None:
    section = {
        "base_dir": "/srv/trees",
        "setup_commands": ["npm ci", "make"],
        "setup_timeout_secs": 30,
        "min_free_bytes": 0,
    }
    loaded = load_worktree_settings(settings_with(tmp_path, section), tmp_path)
    assert loaded.base_dir == Path("/srv/trees")
    assert loaded.setup_commands == ("npm ci", "make")
    assert loaded.setup_timeout_secs == 30
    assert loaded.min_free_bytes == 0


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"base_dir": "relative/path"}, "worktree.base_dir"),
        ({"setup_commands": "npm ci"}, "worktree.setup_commands"),
        ({"setup_commands": [""]}, "worktree.setup_commands"),
        ({"setup_timeout_secs": 0}, "worktree.setup_timeout_secs"),
        ({"setup_timeout_secs": True}, "worktree.setup_timeout_secs"),
        ({"min_free_bytes": -1}, "worktree.min_free_bytes"),
        ([], "worktree"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, section: object, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_worktree_settings(settings_with(tmp_path, section), tmp_path)
    assert caught.value.key == key


async def test_a_bad_worktree_setting_stops_the_daemon_before_it_touches_anything(
    tmp_path: Path,
) -> None:
    config = DaemonConfig(
        data_dir=tmp_path / "data",
        socket_path=tmp_path / "sock" / "daemon.sock",
        claude_bin=str(tmp_path / "no-claude"),
        config_dir=settings_with(tmp_path, {"setup_timeout_secs": 0}),
    )
    with pytest.raises(DaemonStartupError) as caught:
        await Daemon(config).start()
    assert caught.value.exit_code == EXIT_CONFIG_INVALID  # as every invalid setting
    assert "worktree.setup_timeout_secs" in str(caught.value)
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "sock").exists()
