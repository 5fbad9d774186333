"""ConfigService and the permission counters of BetCodeHealth, through a real daemon running the
real CLI: a rule changed over the wire decides the very next permission request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness.daemon import Client, Decision, InProcessDaemon
from harness.environment import Workspace

from betcode.v1 import agent_pb2, config_pb2, config_pb2_grpc, health_pb2, health_pb2_grpc

pytestmark = pytest.mark.real_cli

BASH_PROMPT = "SCN:tool_bash run it"  # the mock model asks to run python3 -c "print(...)"
DENY = config_pb2.PermissionAction.PERMISSION_ACTION_DENY


@pytest.fixture(autouse=True)
def private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set before the daemon is configured, for harnesses that leave the config dir default."""
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
async def client(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace, tmp_path: Path
) -> Client:
    # The daemon writes its settings file: it must be the test's, never the developer's.
    assert daemon.config.config_dir.is_relative_to(tmp_path)
    made = clients("config-client")
    made.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    return made


async def permission_metrics(client: Client) -> dict[str, str]:
    details = await health_pb2_grpc.BetCodeHealthStub(client.channel).GetHealthDetails(
        health_pb2.HealthDetailsRequest()
    )
    [component] = [c for c in details.components if c.name == "permissions"]
    assert component.status == health_pb2.SERVING
    prefix = "permissions."
    return {k[len(prefix) :]: v for k, v in details.metadata.items() if k.startswith(prefix)}


async def test_a_deny_rule_set_over_the_wire_denies_the_next_call_and_is_counted(
    daemon: InProcessDaemon, client: Client
) -> None:
    config = config_pb2_grpc.ConfigServiceStub(client.channel)
    rule = config_pb2.PermissionRule(tool_pattern="Bash", path_pattern="python3:*", action=DENY)
    await config.UpdatePermissions(
        config_pb2.UpdatePermissionsRequest(permissions=config_pb2.PermissionRules(rules=[rule]))
    )
    await client.wait_for("session_info")
    rules = await config.GetPermissions(
        config_pb2.GetPermissionsRequest(session_id=client.session_id)
    )
    assert [(r.description, r.source) for r in rules.rules] == [
        ("Bash(python3:*)", str(daemon.config.config_dir / "settings.json"))
    ]

    client.say(BASH_PROMPT)
    result = (await client.wait_for("tool_call_result")).tool_call_result
    await client.wait_for("turn_complete")

    assert result.is_error
    assert "Denied by rule: Bash(python3:*)" in result.output
    assert client.of_kind("permission_request") == []
    metrics = await permission_metrics(client)
    assert (metrics["auto_deny"], metrics["auto_allow"], metrics["pending"]) == ("1", "0", "0")


async def test_a_forwarded_request_is_counted_pending_then_as_the_users_decision(
    client: Client,
) -> None:
    client.say(BASH_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    assert (await permission_metrics(client))["pending"] == "1"

    client.answer(request.request_id, Decision.PERMISSION_DECISION_DENY, "not now")
    await client.wait_for("turn_complete")

    metrics = await permission_metrics(client)
    assert (metrics["pending"], metrics["user_deny"], metrics["user_allow"]) == ("0", "1", "0")


async def test_settings_of_the_running_daemon_are_read_and_changed(
    daemon: InProcessDaemon, client: Client
) -> None:
    config = config_pb2_grpc.ConfigServiceStub(client.channel)
    settings = await config.GetSettings(config_pb2.GetSettingsRequest())
    assert settings.daemon.socket_path == str(daemon.socket)
    assert settings.daemon.database_path == str(daemon.config.data_dir / "daemon.db")

    settings.permissions.disconnected_timeout_secs = 2 * 3600
    updated = await config.UpdateSettings(config_pb2.UpdateSettingsRequest(settings=settings))

    [ttl] = [e for e in updated.entries if e.key == "daemon.permission.ttl_seconds"]
    assert (ttl.value_json, ttl.origin) == (
        "7200.0",
        str(daemon.config.config_dir / "settings.json"),
    )
