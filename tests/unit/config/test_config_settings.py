"""Daemon settings: defaults, precedence (flags > environment > file > defaults), and errors
that name the file, the key, the value and what is allowed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from betcode.config.errors import ConfigError
from betcode.config.keys import settings_items
from betcode.config.resolve import load_daemon_settings, parse_override
from betcode.config.settings import (
    CrashPolicy,
    DaemonSettings,
    HolderSettings,
    SubprocessSettings,
)
from betcode.config.values import DAY, MIB, Rejected, format_duration, parse_duration

NO_ENV: dict[str, str] = {}


def write(config_dir: Path, data: object) -> Path:
    path = config_dir / "settings.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_defaults_without_a_file(tmp_path: Path) -> None:
    settings = load_daemon_settings(tmp_path / "missing", environ=NO_ENV)
    assert settings == DaemonSettings()
    assert settings.max_payload_bytes == 10 * 1024 * 1024
    assert settings.crash_policy == CrashPolicy(500, 30_000, 2.0, 5, 60.0)
    assert settings.subprocess.timeout_seconds == 300
    assert settings.subprocess.kill_grace_seconds == 5
    assert settings.client_queue_size == 1024
    assert settings.permission.ttl_seconds == 7 * 86400
    assert settings.permission.reminder_seconds == (3600.0, 86400.0)
    assert settings.permission.sweep_interval_seconds == 300
    assert settings.permission.notify_command is None
    assert (settings.input_lock.transfer_seconds, settings.input_lock.idle_handover_seconds) == (
        10,
        300,
    )


def test_file_values_and_claude_keys_side_by_side(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "model": "opus",
            "permissions": {"allow": ["Bash(ls)"]},
            "daemon": {
                "max_sessions": 20,
                "log_level": "DEBUG",
                "crash_policy": {"max_crashes": 3, "window_seconds": "2m"},
                "permission": {
                    "ttl_seconds": "1d",
                    "reminder_seconds": ["30m", "6h"],
                    "notify_command": "notify-send 'BetCode approval'",
                },
                "subprocess": {"env_allowlist_extra": ["MY_TOOL_*", "CORP_PROXY"]},
            },
        },
    )
    settings = load_daemon_settings(tmp_path, environ=NO_ENV)
    assert settings.max_sessions == 20
    assert settings.log_level == "debug"
    assert settings.crash_policy.max_crashes == 3
    assert settings.crash_policy.window_seconds == 120
    assert settings.crash_policy.initial_backoff_ms == 500
    assert settings.permission.ttl_seconds == 86400
    assert settings.permission.reminder_seconds == (1800.0, 21600.0)
    assert settings.permission.notify_command == ("notify-send", "BetCode approval")
    assert settings.subprocess.env_allowlist_extra == ("MY_TOOL_*", "CORP_PROXY")


def test_precedence_flags_then_environment_then_file(tmp_path: Path) -> None:
    write(tmp_path, {"daemon": {"max_sessions": 20, "max_payload_bytes": 2_000_000}})
    env = {"BETCODE_MAX_SESSIONS": "30", "BETCODE_SUBPROCESS_TIMEOUT": "10m"}
    settings = load_daemon_settings(tmp_path, {"max_sessions": 40}, environ=env)
    assert settings.max_sessions == 40
    assert settings.subprocess.timeout_seconds == 600
    assert settings.max_payload_bytes == 2_000_000
    assert load_daemon_settings(tmp_path, environ=env).max_sessions == 30


def test_a_higher_layer_replaces_a_whole_value(tmp_path: Path) -> None:
    write(tmp_path, {"daemon": {"crash_policy": {"max_crashes": 3, "multiplier": 3.0}}})
    settings = load_daemon_settings(tmp_path, {"crash_policy": {"max_crashes": 7}}, environ=NO_ENV)
    # No deep merge: the flag's object replaces the file's, omitted fields are defaults.
    assert settings.crash_policy == CrashPolicy(max_crashes=7)
    dotted = load_daemon_settings(tmp_path, {"crash_policy.max_crashes": 7}, environ=NO_ENV)
    assert dotted.crash_policy == CrashPolicy(max_crashes=7, multiplier=3.0)


@pytest.mark.parametrize(
    ("daemon", "key", "fragment"),
    [
        ({"crash_policy": {"max_crashes": 50}}, "daemon.crash_policy.max_crashes",
         "50 is out of range (allowed 1 to 20)"),
        ({"max_payload_bytes": 1000}, "daemon.max_payload_bytes",
         "1000 is out of range (allowed 1048576 to 104857600)"),
        ({"permission": {"ttl_seconds": "45d"}}, "daemon.permission.ttl_seconds",
         '"45d" is out of range (allowed 1h to 30d)'),
        ({"permission": {"ttl_seconds": "soon"}}, "daemon.permission.ttl_seconds",
         '"soon" is not a duration'),
        ({"subprocess": {"timeout_seconds": 30}}, "daemon.subprocess.timeout_seconds",
         "30 is out of range (allowed 1m to 2h)"),
        ({"client_queue_size": 100}, "daemon.client_queue_size",
         "100 is out of range (allowed 128 to 8192)"),
        ({"client_queue_size": "1024"}, "daemon.client_queue_size", '"1024" is not a whole number'),
        ({"client_queue_size": True}, "daemon.client_queue_size", "true is not a whole number"),
        ({"crash_policy": {"multiplier": 5}}, "daemon.crash_policy.multiplier",
         "5 is out of range (allowed 1.5 to 4)"),
        ({"client_silence_seconds": 5}, "daemon.client_silence_seconds",
         "5 is out of range (allowed 10s to 2m)"),
        ({"input_lock": {"transfer_seconds": 2}}, "daemon.input_lock.transfer_seconds",
         "2 is out of range (allowed 5s to 1m)"),
        ({"log_level": "loud"}, "daemon.log_level", '"loud" is not one of error, warn'),
        ({"permission": {"extend_on_activity": "yes"}}, "daemon.permission.extend_on_activity",
         '"yes" is not true or false'),
        ({"permission": {"reminder_seconds": ["24h", "1h"]}}, "daemon.permission.reminder_seconds",
         "must be in increasing order"),
        ({"permission": {"notify_command": []}}, "daemon.permission.notify_command",
         "is not a command"),
        ({"subprocess": {"env_allowlist_extra": ["OK", "NOT OK"]}},
         "daemon.subprocess.env_allowlist_extra", "'NOT OK'"),
        ({"crash_policy": 5}, "daemon.crash_policy", "must be an object, got 5"),
        ({"crash_policy": {"initial_backoff_ms": 4000, "max_backoff_ms": 2000}},
         "daemon.crash_policy", "must not be below initial_backoff_ms"),
        ({"holder": {"spool_limit_bytes": 1048576}}, "daemon.holder.spool_limit_bytes",
         "1048576 is out of range (allowed 2097152 to 17179869184)"),
        ({"holder": {"spool_limit_bytes": "64MiB"}}, "daemon.holder.spool_limit_bytes",
         '"64MiB" is not a whole number'),
        ({"holder": {"unattended_seconds": "forever"}}, "daemon.holder.unattended_seconds",
         '"forever" is not a duration'),
        ({"holder": {"unattended_seconds": "400d"}}, "daemon.holder.unattended_seconds",
         '"400d" is out of range (allowed 0s to 365d)'),
        ({"holder": {"spool_limit_bytes": 16777216}}, "daemon.holder.spool_limit_bytes",
         "16777216 must be at least twice max_payload_bytes (10485760)"),
        ({"grpc": {"server": "tonic"}}, "daemon.grpc.server", '"tonic" is not one of betcode'),
        ({"grpc": {"connection_buffer_bytes": 16777216}}, "daemon.grpc.connection_buffer_bytes",
         "16777216 is out of range (allowed 33554432 to 4294967296)"),
        ({"grpc": {"write_high_water_bytes": 65536, "write_low_water_bytes": 65536}},
         "daemon.grpc.write_low_water_bytes", "must be below write_high_water_bytes (65536)"),
    ],
)  # fmt: skip
def test_invalid_values_name_file_key_value_and_range(
    tmp_path: Path, daemon: dict[str, object], key: str, fragment: str
) -> None:
    path = write(tmp_path, {"daemon": daemon})
    with pytest.raises(ConfigError) as caught:
        load_daemon_settings(tmp_path, environ=NO_ENV)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: ")
    assert fragment in message
    assert caught.value.key == key


def test_errors_from_flags_and_environment_say_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^command line: daemon\.max_sessions: 0 is out"):
        load_daemon_settings(tmp_path, {"max_sessions": 0}, environ=NO_ENV)
    env = {"BETCODE_LOG_LEVEL": "chatty"}
    with pytest.raises(
        ConfigError, match=r"^environment variable BETCODE_LOG_LEVEL: daemon\.log_level"
    ):
        load_daemon_settings(tmp_path, environ=env)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"daemon": {"max_sessions": 5,}}', "malformed JSON at line 1, column 31"),
        ('{\n  "daemon": {\n    "max_sessions" 5\n  }\n}', "malformed JSON at line 3, column 20"),
        ("[1, 2]", "must contain a JSON object"),
        ('{"daemon": []}', "daemon: must be an object"),
    ],
)
def test_malformed_files(tmp_path: Path, content: str, fragment: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(ConfigError) as caught:
        load_daemon_settings(tmp_path, environ=NO_ENV)
    assert str(caught.value).startswith(str(path))
    assert fragment in str(caught.value)


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    write(tmp_path, "  \n")
    assert load_daemon_settings(tmp_path, environ=NO_ENV) == DaemonSettings()


def test_unknown_keys_warn_and_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, {"daemon": {"max_sesions": 5, "crash_policy": {"retries": 1}}})
    with caplog.at_level(logging.WARNING, logger="betcode.config"):
        settings = load_daemon_settings(tmp_path, environ=NO_ENV)
    assert settings == DaemonSettings()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{path}: unknown setting daemon.max_sesions ignored" in warnings
    assert f"{path}: unknown setting daemon.crash_policy.retries ignored" in warnings


def test_code_may_construct_values_outside_the_file_ranges() -> None:
    # Tests and benchmarks need short timers; only files, variables and flags are range-checked.
    settings = SubprocessSettings(timeout_seconds=2, kill_grace_seconds=0.2)
    assert settings.timeout_seconds == 2
    with pytest.raises(ValueError, match="max_backoff_ms"):
        CrashPolicy(initial_backoff_ms=100, max_backoff_ms=10)


def test_settings_items_lists_every_leaf() -> None:
    items = dict(settings_items(DaemonSettings()))
    assert items["daemon.crash_policy.max_crashes"] == 5
    assert items["daemon.permission.ttl_seconds"] == 604800
    assert items["daemon.subagent.max_concurrent"] == 5
    assert items["daemon.worktree.setup_timeout_secs"] == 120
    assert items["daemon.grpc.max_concurrent_streams"] == 1000
    assert len(items) == 61


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("6h", 21600.0),
        ("1d", 86400.0),
        ("7d", 604800.0),
        ("30d", 2592000.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        (" 2D ", 172800.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "h", "1x", "1h-", "-1h", "1.h", None, True, [1], "1hh"])
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(Rejected, match="is not a duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (1.5, "1.5s"), (60, "1m"), (5400, "1h30m"), (604800, "7d")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("crash_policy.max_crashes=3", "crash_policy.max_crashes", 3),
        ("daemon.log_level=debug", "log_level", "debug"),
        ("permission.ttl_seconds=1d", "permission.ttl_seconds", "1d"),
        ("permission.extend_on_activity=false", "permission.extend_on_activity", False),
        ('crash_policy={"max_crashes": 2}', "crash_policy", {"max_crashes": 2}),
        ('subprocess.env_allowlist_extra=["A_*"]', "subprocess.env_allowlist_extra", ["A_*"]),
        ("permission.notify_command=notify-send x=1", "permission.notify_command",
         "notify-send x=1"),
    ],
)  # fmt: skip
def test_set_flags_parse_to_dotted_keys_and_json_values(text: str, key: str, value: object) -> None:
    assert parse_override(text) == (key, value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("max_crashes=3", "command line: daemon.max_crashes: is not a daemon setting"),
        ("crash_policy.max_crashes", "expected KEY=VALUE"),
        ("=3", "expected KEY=VALUE"),
    ],
)
def test_set_flags_that_name_no_setting_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_override(text)


def test_subagent_pool_settings_are_checked_and_read_from_the_environment(tmp_path: Path) -> None:
    settings = load_daemon_settings(tmp_path, environ={"BETCODE_MAX_SUBAGENTS": "7"})
    assert settings.subagent.max_concurrent == 7
    with pytest.raises(ConfigError, match=r"daemon\.subagent\.max_concurrent.*21"):
        load_daemon_settings(tmp_path, {"subagent.max_concurrent": 21}, environ={})


def test_holder_settings_from_the_file_and_flags(tmp_path: Path) -> None:
    assert load_daemon_settings(tmp_path, environ=NO_ENV).holder == HolderSettings(
        spool_limit_bytes=64 * MIB, unattended_seconds=7 * DAY
    )
    write(tmp_path, {"daemon": {"holder": {"spool_limit_bytes": 32 * MIB}}})
    flags = {"holder.unattended_seconds": "0"}  # 0: a holder waits for a daemon for ever
    settings = load_daemon_settings(tmp_path, flags, environ=NO_ENV)
    assert settings.holder == HolderSettings(spool_limit_bytes=32 * MIB, unattended_seconds=0)


def test_relay_urls_are_a_list_of_urls(tmp_path: Path) -> None:
    urls = ["https://relay-a:8444", "https://relay-b:8444"]
    settings = load_daemon_settings(tmp_path, {"relay": {"urls": urls}}, environ=NO_ENV)
    assert settings.relay.urls == tuple(urls)
    assert settings.relay.heartbeat_interval_seconds == 20.0
    with pytest.raises(ConfigError, match=r"relay\.urls"):
        load_daemon_settings(tmp_path, {"relay": {"urls": "https://one"}}, environ=NO_ENV)
    with pytest.raises(ConfigError, match="heartbeat_timeout_seconds"):
        load_daemon_settings(tmp_path, {"relay": {"heartbeat_timeout_seconds": 2}}, environ=NO_ENV)
