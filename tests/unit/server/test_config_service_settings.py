"""ConfigService settings over a real socket: effective values and their origins, validated
updates written to <config dir>/settings.json, refusals that leave the file untouched."""

from __future__ import annotations

import json

import grpc
import pytest
from config_service_world import ConfigWorld, StartWorld, rpc_error, start_world

from betcode.v1 import config_pb2

__all__ = ["start_world"]  # the fixture, used by name

MIB = 1024 * 1024


def entries(settings: config_pb2.Settings) -> dict[str, tuple[object, str, str]]:
    return {e.key: (json.loads(e.value_json), e.origin, e.allowed) for e in settings.entries}


async def test_defaults_with_no_settings_file(start_world: StartWorld) -> None:
    world = await start_world()
    settings = await world.stub.GetSettings(config_pb2.GetSettingsRequest())

    assert settings.daemon.max_payload_bytes == 10 * MIB
    assert settings.daemon.log_level == "info"
    assert settings.daemon.max_subprocesses == 100
    assert settings.daemon.socket_path == str(world.socket_path)
    assert settings.daemon.database_path == str(world.root / "daemon.db")
    assert settings.daemon.port == 0
    assert settings.permissions.connected_timeout_secs == 7 * 86400
    assert settings.permissions.disconnected_timeout_secs == 7 * 86400
    assert settings.permissions.activity_refresh_enabled
    assert not settings.permissions.enable_auto_approve
    assert settings.sessions == config_pb2.SessionSettings()
    listed = entries(settings)
    assert {origin for _, origin, _ in listed.values()} == {"default"}
    assert listed["daemon.permission.ttl_seconds"] == (604800.0, "default", "allowed 1h to 30d")
    assert listed["daemon.log_level"][2] == "one of error, warn, info, debug, trace"
    assert listed["daemon.permission.notify_command"][0] is None
    assert not world.settings_file.exists()


async def test_each_value_names_where_it_came_from(start_world: StartWorld) -> None:
    world = await start_world(
        environ={"BETCODE_MAX_PAYLOAD_BYTES": str(2 * MIB)}, overrides={"max_sessions": 5}
    )
    world.write_settings({"daemon": {"log_level": "debug", "crash_policy": {"max_crashes": 3}}})
    settings = await world.stub.GetSettings(config_pb2.GetSettingsRequest(scope="user"))

    listed = entries(settings)
    assert listed["daemon.log_level"][:2] == ("debug", str(world.settings_file))
    assert listed["daemon.crash_policy.max_crashes"][:2] == (3, str(world.settings_file))
    assert listed["daemon.crash_policy.max_backoff_ms"][1] == "default"
    assert listed["daemon.max_payload_bytes"][:2] == (
        2 * MIB,
        "environment variable BETCODE_MAX_PAYLOAD_BYTES",
    )
    assert listed["daemon.max_sessions"][:2] == (5, "command line")
    assert (settings.daemon.log_level, settings.daemon.max_subprocesses) == ("debug", 5)


async def test_a_changed_field_is_written_keeping_the_rest_of_the_file(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    world.write_settings({"model": "opus", "permissions": {"allow": ["Read"]}})
    current = await world.stub.GetSettings(config_pb2.GetSettingsRequest())
    current.daemon.max_payload_bytes = 2 * MIB
    current.permissions.disconnected_timeout_secs = 3600  # connected_ still holds the old TTL

    updated = await world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=current))

    assert updated.daemon.max_payload_bytes == 2 * MIB
    assert updated.permissions.connected_timeout_secs == 3600
    assert entries(updated)["daemon.max_payload_bytes"][1] == str(world.settings_file)
    assert world.read_settings() == {
        "model": "opus",
        "permissions": {"allow": ["Read"]},
        "daemon": {"max_payload_bytes": 2 * MIB, "permission": {"ttl_seconds": 3600}},
    }
    assert world.changes == ["reload"]


async def test_any_setting_can_be_changed_by_key(start_world: StartWorld) -> None:
    world = await start_world()
    request = config_pb2.UpdateSettingsRequest(
        settings=config_pb2.Settings(
            entries=[
                config_pb2.SettingEntry(key="daemon.permission.ttl_seconds", value_json='"2h"'),
                config_pb2.SettingEntry(key="daemon.crash_policy.max_crashes", value_json="7"),
                config_pb2.SettingEntry(key="daemon.log_level", value_json='"info"'),  # as is
            ]
        )
    )
    updated = await world.stub.UpdateSettings(request)

    assert updated.permissions.disconnected_timeout_secs == 7200
    assert entries(updated)["daemon.crash_policy.max_crashes"][0] == 7
    assert world.read_settings() == {
        "daemon": {"permission": {"ttl_seconds": "2h"}, "crash_policy": {"max_crashes": 7}}
    }


async def test_an_unchanged_request_writes_nothing(start_world: StartWorld) -> None:
    world = await start_world()
    current = await world.stub.GetSettings(config_pb2.GetSettingsRequest())
    await world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=current))
    assert not world.settings_file.exists()
    assert world.changes == []


def _field_change(group: str, name: str, value: object) -> config_pb2.Settings:
    settings = config_pb2.Settings()
    setattr(getattr(settings, group), name, value)
    return settings


def _entry_change(key: str, value_json: str) -> config_pb2.Settings:
    return config_pb2.Settings(entries=[config_pb2.SettingEntry(key=key, value_json=value_json)])


# (request, what the message must contain)
REJECTED = [
    (
        _field_change("daemon", "max_payload_bytes", 500),
        ["daemon.max_payload_bytes", "500", "allowed 1048576 to 104857600"],
    ),
    (_field_change("daemon", "log_level", "loud"), ["daemon.log_level", '"loud"', "one of error"]),
    (
        _field_change("permissions", "disconnected_timeout_secs", 60),
        ["daemon.permission.ttl_seconds", "60", "allowed 1h to 30d"],
    ),
    (
        _entry_change("daemon.permission.reminder_seconds", "[86400, 3600]"),
        ["daemon.permission.reminder_seconds", "increasing order"],
    ),
    (
        config_pb2.Settings(
            entries=[
                config_pb2.SettingEntry(
                    key="daemon.crash_policy.max_backoff_ms", value_json="2000"
                ),
                config_pb2.SettingEntry(
                    key="daemon.crash_policy.initial_backoff_ms", value_json="5000"
                ),
            ]
        ),
        ["daemon.crash_policy:", "max_backoff_ms (2000)", "initial_backoff_ms (5000)"],
    ),
    (_entry_change("daemon.colour", '"blue"'), ["daemon.colour", "no such setting"]),
    (_entry_change("daemon.log_level", "debug"), ["daemon.log_level", "not JSON"]),
    (
        config_pb2.Settings(
            permissions=config_pb2.PermissionSettings(
                connected_timeout_secs=3600, disconnected_timeout_secs=7200
            )
        ),
        ["daemon.permission.ttl_seconds", "3600", "7200", "send one value"],
    ),
    (_field_change("daemon", "socket_path", "/elsewhere.sock"), ["daemon.socket_path", "fixed"]),
    (_field_change("sessions", "default_model", "opus"), ["sessions", "no such setting"]),
    (
        _field_change("permissions", "enable_auto_approve", True),
        ["permissions.enable_auto_approve", "permission rules"],
    ),
    (config_pb2.Settings(feature_flags={"x": True}), ["feature_flags", "no such setting"]),
]


@pytest.mark.parametrize(("settings", "expected"), REJECTED)
async def test_a_rejected_change_names_the_problem_and_leaves_the_file_untouched(
    start_world: StartWorld, settings: config_pb2.Settings, expected: list[str]
) -> None:
    world = await start_world()
    world.write_settings({"daemon": {"log_level": "warn"}, "model": "opus"})
    before = world.settings_file.read_bytes()

    error = await rpc_error(
        world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=settings))
    )

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    for text in expected:
        assert text in (error.details() or ""), error.details()
    assert world.settings_file.read_bytes() == before
    assert world.changes == []


async def test_a_setting_from_the_environment_or_a_flag_is_not_changed_in_the_file(
    start_world: StartWorld,
) -> None:
    world = await start_world(environ={"BETCODE_LOG_LEVEL": "debug"}, overrides={"max_sessions": 3})
    for settings, origin in [
        (_field_change("daemon", "log_level", "warn"), "environment variable BETCODE_LOG_LEVEL"),
        (_field_change("daemon", "max_subprocesses", 9), "command line"),
    ]:
        error = await rpc_error(
            world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=settings))
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"set by {origin}" in (error.details() or "")
    assert not world.settings_file.exists()


async def test_a_broken_settings_file_is_reported_and_kept(start_world: StartWorld) -> None:
    world = await start_world()
    world.config_dir.mkdir()
    world.settings_file.write_text('{"daemon": {"log_level": "warn",}}')

    error = await rpc_error(world.stub.GetSettings(config_pb2.GetSettingsRequest()))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert str(world.settings_file) in (error.details() or "")
    assert "malformed JSON at line 1" in (error.details() or "")

    change = _field_change("daemon", "max_payload_bytes", 2 * MIB)
    error = await rpc_error(
        world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=change))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert world.settings_file.read_text() == '{"daemon": {"log_level": "warn",}}'


async def test_a_bad_value_already_in_the_file_blocks_changes_until_fixed(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    world.write_settings({"daemon": {"max_sessions": 0}})
    change = _field_change("daemon", "log_level", "debug")
    error = await rpc_error(
        world.stub.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=change))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "daemon.max_sessions: 0 is out of range" in (error.details() or "")


async def test_unknown_scopes_and_mcp_servers_are_refused_with_a_reason(
    start_world: StartWorld,
) -> None:
    world: ConfigWorld = await start_world()
    error = await rpc_error(world.stub.GetSettings(config_pb2.GetSettingsRequest(scope="project")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scope 'project' is not supported" in (error.details() or "")

    error = await rpc_error(world.stub.ListMcpServers(config_pb2.ListMcpServersRequest()))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "claude starts them from its own settings" in (error.details() or "")
