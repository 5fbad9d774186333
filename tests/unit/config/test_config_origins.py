"""Where each daemon setting's value came from (`resolve_daemon_settings`): the default, the
settings file, an environment variable or a `--set` flag, the layer that decides winning; and
errors of a whole section naming the layer that set a key inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from betcode.config.errors import ConfigError
from betcode.config.keys import settings_items
from betcode.config.origins import COMMAND_LINE, DEFAULT_ORIGIN
from betcode.config.resolve import load_daemon_settings, resolve_daemon_settings
from betcode.config.settings import DaemonSettings

NO_ENV: dict[str, str] = {}
ENV_TIMEOUT = "environment variable BETCODE_SUBPROCESS_TIMEOUT"


def write(config_dir: Path, daemon: object) -> str:
    path = config_dir / "settings.json"
    path.write_text(json.dumps({"daemon": daemon, "permissions": {"allow": ["Bash(ls)"]}}))
    return str(path)


def test_without_a_file_everything_is_a_default(tmp_path: Path) -> None:
    resolved = resolve_daemon_settings(tmp_path / "missing", environ=NO_ENV)
    assert resolved.settings == DaemonSettings()
    assert [v.key for v in resolved.values] == [k for k, _ in settings_items(DaemonSettings())]
    assert {v.origin for v in resolved.values} == {DEFAULT_ORIGIN}
    ttl = resolved.value("daemon.permission.ttl_seconds")
    assert (ttl.value, ttl.allowed) == (7 * 86400.0, "allowed 1h to 30d")
    assert resolved.value("daemon.log_level").allowed == "one of error, warn, info, debug, trace"
    assert resolved.value("daemon.permission.extend_on_activity").allowed == "true or false"


# (file's daemon section, environment, flags) -> {key below `daemon`: (value, origin)};
# "FILE" stands for the settings file's path.
CASES = [
    pytest.param(
        {"max_sessions": 7, "crash_policy": {"max_crashes": 3}}, {}, {},
        {"max_sessions": (7, "FILE"), "crash_policy.max_crashes": (3, "FILE"),
         "crash_policy.max_backoff_ms": (30_000, DEFAULT_ORIGIN),
         "log_level": ("info", DEFAULT_ORIGIN)},
        id="file-over-defaults",
    ),
    pytest.param(
        {"subprocess": {"timeout_seconds": 600}}, {"BETCODE_SUBPROCESS_TIMEOUT": "2m"}, {},
        {"subprocess.timeout_seconds": (120.0, ENV_TIMEOUT),
         "subprocess.idle_reap_seconds": (600.0, DEFAULT_ORIGIN)},
        id="environment-over-file",
    ),
    pytest.param(
        {"max_sessions": 7}, {"BETCODE_MAX_SESSIONS": "9"}, {"max_sessions": 11},
        {"max_sessions": (11, COMMAND_LINE)},
        id="flag-over-environment-and-file",
    ),
    pytest.param(
        {}, {"BETCODE_MAX_SESSIONS": ""}, {},
        {"max_sessions": (100, DEFAULT_ORIGIN)},
        id="an-empty-variable-is-unset",
    ),
    pytest.param(
        {"crash_policy": {"max_crashes": 3, "multiplier": 3.0}}, {},
        {"crash_policy": {"multiplier": 2.5}},
        # The flag replaced the whole section: even the fields it omits are its doing.
        {"crash_policy.multiplier": (2.5, COMMAND_LINE),
         "crash_policy.max_crashes": (5, COMMAND_LINE)},
        id="a-section-flag-owns-the-whole-section",
    ),
    pytest.param(
        {}, {"BETCODE_SUBPROCESS_TIMEOUT": "2m"}, {"subprocess": {"kill_grace_seconds": 9}},
        {"subprocess.timeout_seconds": (300.0, COMMAND_LINE),
         "subprocess.kill_grace_seconds": (9.0, COMMAND_LINE)},
        id="a-section-flag-replaces-an-environment-value-inside-it",
    ),
    pytest.param(
        {"crash_policy": {"max_crashes": 3, "multiplier": 3.0}}, {},
        {"crash_policy.max_crashes": 7},
        {"crash_policy.max_crashes": (7, COMMAND_LINE),
         "crash_policy.multiplier": (3.0, "FILE")},
        id="a-dotted-flag-sets-one-key",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("daemon", "environ", "flags", "expected"), CASES)
def test_each_value_names_the_layer_it_came_from(
    tmp_path: Path,
    daemon: dict[str, object],
    environ: dict[str, str],
    flags: dict[str, object],
    expected: dict[str, tuple[object, str]],
) -> None:
    path = write(tmp_path, daemon)
    resolved = resolve_daemon_settings(tmp_path, flags, environ=environ)
    for key, (value, origin) in expected.items():
        shown = resolved.value(f"daemon.{key}")
        assert (shown.value, shown.origin) == (value, path if origin == "FILE" else origin), key
    assert resolved.settings == load_daemon_settings(tmp_path, flags, environ=environ)


def test_a_section_error_names_the_flag_that_set_a_key_inside_it(tmp_path: Path) -> None:
    """Backoffs from flags, each in range but the maximum below the initial one: the section is
    invalid, and the message points at the flags, not at a file that has no crash_policy."""
    write(tmp_path, {"max_sessions": 7})
    flags = {"crash_policy.initial_backoff_ms": 4000, "crash_policy.max_backoff_ms": 2000}
    with pytest.raises(ConfigError) as caught:
        load_daemon_settings(tmp_path, flags, environ=NO_ENV)
    assert str(caught.value).startswith(f"{COMMAND_LINE}: daemon.crash_policy: max_backoff_ms")
