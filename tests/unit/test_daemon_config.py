"""The daemon's configuration: settings files, environment and flags mapped onto what the
daemon's parts take, and what a reload reports as changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from betcode.claude.backoff import SupervisorPolicy
from betcode.config.errors import ConfigError
from betcode.config.resolve import load_daemon_settings
from betcode.config.settings import DaemonSettings, PermissionSettings
from betcode.daemon_config import (
    DaemonConfig,
    load_daemon_config,
    settings_changes,
    takes_effect,
    with_settings,
)
from betcode.sessions.context import SessionSettings


def write_settings(config_dir: Path, daemon: dict[str, object]) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "settings.json"
    path.write_text(json.dumps({"permissions": {"allow": ["Read"]}, "daemon": daemon}))
    return path


def load(tmp_path: Path, **kwargs: object) -> DaemonConfig:
    return load_daemon_config(
        data_dir=tmp_path / "data",
        socket_path=tmp_path / "daemon.sock",
        config_dir=tmp_path / "config",
        **kwargs,  # type: ignore[arg-type]
    )


def test_defaults_map_onto_the_parts_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, environ={})
    assert config.settings == DaemonSettings()
    assert config.policy == SupervisorPolicy()
    assert config.sessions == SessionSettings()
    assert config.permissions == PermissionSettings()
    assert config.env_allow == ()


def test_file_values_reach_policy_sessions_permissions_and_environment(tmp_path: Path) -> None:
    write_settings(
        tmp_path / "config",
        {
            "max_payload_bytes": 2 * 1024 * 1024,
            "client_queue_size": 256,
            "crash_policy": {
                "initial_backoff_ms": 250,
                "max_backoff_ms": 8000,
                "multiplier": 3,
                "max_crashes": 2,
                "window_seconds": "2m",
            },
            "subprocess": {
                "timeout_seconds": "10m",
                "idle_reap_seconds": "1h",
                "kill_grace_seconds": 2,
                "env_allowlist_extra": ["CORP_*"],
            },
            "permission": {"ttl_seconds": "2h", "sweep_interval_seconds": "30s"},
            "input_lock": {"transfer_seconds": 20, "idle_handover_seconds": "2m"},
        },
    )
    config = load(tmp_path, environ={}, listen="127.0.0.1:0", claude_bin="/bin/claude")
    assert config.policy == SupervisorPolicy(
        backoff_initial=0.25,
        backoff_max=8.0,
        backoff_multiplier=3.0,
        max_crashes=2,
        window_seconds=120.0,
        watchdog_seconds=600.0,
        kill_grace_seconds=2.0,
        idle_reap_seconds=3600.0,
        max_line_bytes=2 * 1024 * 1024,
    )
    assert config.sessions == SessionSettings(
        client_queue_size=256, lock_transfer_seconds=20.0, lock_idle_seconds=120.0
    )
    assert config.permissions.ttl_seconds == 7200
    assert config.permissions.sweep_interval_seconds == 30
    assert config.env_allow == ("CORP_*",)
    assert (config.listen, config.claude_bin) == ("127.0.0.1:0", "/bin/claude")
    assert config.settings_file == tmp_path / "config" / "settings.json"


def test_idle_reap_zero_disables_reaping(tmp_path: Path) -> None:
    write_settings(tmp_path / "config", {"subprocess": {"idle_reap_seconds": 0}})
    assert load(tmp_path, environ={}).policy.idle_reap_seconds is None


def test_flags_win_over_environment_and_file_and_are_kept_for_reloads(tmp_path: Path) -> None:
    write_settings(tmp_path / "config", {"max_sessions": 20, "crash_policy": {"max_crashes": 3}})
    env = {"BETCODE_MAX_SESSIONS": "30"}
    config = load(tmp_path, environ=env, overrides={"crash_policy.max_crashes": 9})
    assert config.policy.max_crashes == 9
    assert config.settings.max_sessions == 30
    assert config.settings_overrides == {"crash_policy.max_crashes": 9}
    assert config.environ == env


def test_an_invalid_value_names_file_key_value_and_range(tmp_path: Path) -> None:
    path = write_settings(tmp_path / "config", {"input_lock": {"idle_handover_seconds": 5}})
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, environ={})
    assert str(caught.value) == (
        f"{path}: daemon.input_lock.idle_handover_seconds: 5 is out of range (allowed 1m to 1h)"
    )


def test_with_settings_keeps_paths_and_flags(tmp_path: Path) -> None:
    config = load(tmp_path, environ={}, overrides={"log_level": "debug"})
    settings = load_daemon_settings(tmp_path, {"client_queue_size": 512}, environ={})
    changed = with_settings(config, settings)
    assert changed.sessions.client_queue_size == 512
    assert changed.settings_overrides == config.settings_overrides
    assert changed.data_dir == config.data_dir
    assert changed.socket_path == config.socket_path


def test_settings_changes_lists_each_changed_leaf() -> None:
    before = DaemonSettings()
    after = load_daemon_settings(
        Path("/nonexistent"),
        {"crash_policy.max_crashes": 2, "input_lock.idle_handover_seconds": 120},
        environ={},
    )
    assert settings_changes(before, after) == [
        ("daemon.crash_policy.max_crashes", 5, 2),
        ("daemon.input_lock.idle_handover_seconds", 300.0, 120.0),
    ]
    assert settings_changes(after, after) == []


@pytest.mark.parametrize(
    ("key", "when"),
    [
        ("daemon.input_lock.idle_handover_seconds", "applied"),
        ("daemon.subprocess.timeout_seconds", "applied"),
        ("daemon.subprocess.env_allowlist_extra", "for claude processes started from now on"),
        ("daemon.crash_policy.initial_backoff_ms", "for restarts from now on"),
        ("daemon.crash_policy.max_crashes", "for sessions opened from now on"),
        ("daemon.permission.ttl_seconds", "for requests from now on and on activity"),
        ("daemon.permission.reminder_seconds", "from the next sweep"),
        ("daemon.log_level", "applied"),
    ],
)
def test_each_key_says_when_a_reload_takes_effect(key: str, when: str) -> None:
    assert takes_effect(key) == when
