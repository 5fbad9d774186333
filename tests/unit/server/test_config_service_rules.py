"""ConfigService permission rules over a real socket: reading the config dir's rules or a
session's, replacing them (validated, written atomically, the rule book reloaded)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import grpc
from config_service_world import ConfigWorld, StartWorld, rpc_error, start_world

from betcode.permissions.rules import Rule
from betcode.server.config_store import write_atomically
from betcode.v1 import config_pb2

__all__ = ["start_world"]  # the fixture, used by name

Action = config_pb2.PermissionAction
ALLOW, DENY, ASK = (
    Action.PERMISSION_ACTION_ALLOW,
    Action.PERMISSION_ACTION_DENY,
    Action.PERMISSION_ACTION_ASK,
)


def rule(
    tool: str, pattern: str = "", action: Action.ValueType = ALLOW
) -> config_pb2.PermissionRule:
    return config_pb2.PermissionRule(tool_pattern=tool, path_pattern=pattern, action=action)


def update(*rules: config_pb2.PermissionRule) -> config_pb2.UpdatePermissionsRequest:
    return config_pb2.UpdatePermissionsRequest(
        permissions=config_pb2.PermissionRules(rules=list(rules))
    )


def texts(rules: config_pb2.PermissionRules) -> list[tuple[str, int]]:
    return [(r.description, r.action) for r in rules.rules]


async def test_the_config_dir_rules_with_action_priority_source_and_invalid_ones(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    world.write_settings(
        {
            "permissions": {
                "allow": ["Bash(npm run test:*)", "Read(src/**)"],
                "deny": ["WebFetch", "Bash(rm -rf:*)"],
                "ask": ["Edit", "Bash(git push"],
            }
        }
    )
    answer = await world.stub.GetPermissions(config_pb2.GetPermissionsRequest())

    source = str(world.settings_file)
    by_text = {r.description: r for r in answer.rules}
    assert texts(answer)[:5] == [
        ("WebFetch", DENY),
        ("Bash(rm -rf:*)", DENY),
        ("Edit", ASK),
        ("Bash(npm run test:*)", ALLOW),
        ("Read(src/**)", ALLOW),
    ]
    read = by_text["Read(src/**)"]
    assert (read.tool_pattern, read.path_pattern, read.source) == ("Read", "src/**", source)
    assert [by_text[t].priority for t in ("WebFetch", "Edit", "Read(src/**)")] == [3, 2, 1]
    assert len({r.id for r in answer.rules}) == len(answer.rules)
    assert list(answer.denied_tools) == ["WebFetch"]
    assert list(answer.require_approval) == ["Edit"]
    [invalid] = [r for r in answer.rules if r.action == Action.PERMISSION_ACTION_UNSPECIFIED]
    assert invalid.tool_pattern == "Bash(git push"
    assert invalid.description.startswith("invalid ask rule, skipped: the specifier must end")


async def test_replacing_the_rules_keeps_the_rest_of_the_file_and_reloads(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    world.write_settings(
        {"env": {"X": "1"}, "permissions": {"allow": ["Read"], "defaultMode": "plan"}}
    )
    cwd = str(world.workdir)
    assert [r.text for r in await _rules_for(world, cwd)] == ["Read"]

    answer = await world.stub.UpdatePermissions(
        update(
            rule("Bash", "python3:*", DENY),
            rule("Bash(echo \\(hi\\))"),
            rule("mcp__github__*", action=ASK),
        )
    )

    assert world.read_settings() == {
        "env": {"X": "1"},
        "permissions": {
            "allow": ["Bash(echo \\(hi\\))"],
            "defaultMode": "plan",
            "deny": ["Bash(python3:*)"],
            "ask": ["mcp__github__*"],
        },
    }
    assert texts(answer) == [
        ("Bash(python3:*)", DENY),
        ("mcp__github__*", ASK),
        ("Bash(echo \\(hi\\))", ALLOW),
    ]
    assert world.changes == ["reload"]
    assert [r.text for r in await _rules_for(world, cwd)] == [
        "Bash(python3:*)",
        "mcp__github__*",
        "Bash(echo \\(hi\\))",
    ]


async def test_what_get_permissions_returns_can_be_sent_back_unchanged(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    rules = {"allow": ["Bash(echo \\(x\\) *)", "Read(//etc/hosts)"], "deny": ["Write"], "ask": []}
    world.write_settings({"permissions": rules})
    before = await world.stub.GetPermissions(config_pb2.GetPermissionsRequest())

    after = await world.stub.UpdatePermissions(
        config_pb2.UpdatePermissionsRequest(permissions=before)
    )

    assert after == before
    assert world.read_settings() == {"permissions": {**rules}}


async def test_invalid_rules_are_all_named_and_nothing_is_written(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    world.write_settings({"permissions": {"allow": ["Read"]}})
    before = world.settings_file.read_bytes()

    error = await rpc_error(
        world.stub.UpdatePermissions(
            update(rule("Bash(git push", action=DENY), rule("Read"), rule("Task", "anything"))
        )
    )

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    message = error.details() or ""
    assert "deny rule 'Bash(git push': the specifier must end with `)`" in message
    assert "allow rule 'Task(anything)': BetCode matches specifiers only for Bash" in message
    assert world.settings_file.read_bytes() == before
    assert world.changes == []


async def test_rules_that_cannot_be_stored_are_refused(start_world: StartWorld) -> None:
    world = await start_world()
    ask_session = rule("Read", action=Action.PERMISSION_ACTION_ASK_SESSION)
    elsewhere = config_pb2.PermissionRule(
        tool_pattern="Read", action=ALLOW, source="/repo/.claude/settings.json"
    )
    for bad, expected in [
        (ask_session, "action PERMISSION_ACTION_ASK_SESSION has no Claude Code settings list"),
        (
            rule("Read", action=Action.PERMISSION_ACTION_UNSPECIFIED),
            "PERMISSION_ACTION_UNSPECIFIED",
        ),
        (elsewhere, "comes from /repo/.claude/settings.json: only the rules of"),
    ]:
        error = await rpc_error(world.stub.UpdatePermissions(update(bad)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert expected in (error.details() or "")
    assert not world.settings_file.exists()


async def test_denied_tools_and_require_approval_become_tool_wide_rules(
    start_world: StartWorld,
) -> None:
    world = await start_world()
    request = config_pb2.UpdatePermissionsRequest(
        permissions=config_pb2.PermissionRules(
            rules=[rule("WebFetch", action=DENY)],
            denied_tools=["WebFetch", "Write"],
            require_approval=["Edit"],
        )
    )
    await world.stub.UpdatePermissions(request)
    assert world.read_settings()["permissions"] == {
        "allow": [],
        "deny": ["WebFetch", "Write"],
        "ask": ["Edit"],
    }


async def test_a_sessions_rules_include_its_project_files(start_world: StartWorld) -> None:
    world = await start_world()
    world.write_settings({"permissions": {"deny": ["WebFetch"]}})
    project = world.workdir / ".claude"
    project.mkdir()
    (project / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}}))
    session = await world.sessions.create(working_directory=str(world.workdir))

    answer = await world.stub.GetPermissions(
        config_pb2.GetPermissionsRequest(session_id=session.id)
    )

    assert [(r.description, r.source) for r in answer.rules] == [
        ("Bash(ls)", str(project / "settings.json")),
        ("WebFetch", str(world.settings_file)),
    ]
    error = await rpc_error(
        world.stub.GetPermissions(config_pb2.GetPermissionsRequest(session_id="no-such-session"))
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_concurrent_replacements_leave_one_whole_version(start_world: StartWorld) -> None:
    world = await start_world()
    calls = [world.stub.UpdatePermissions(update(rule(f"Tool{n}"))) for n in range(8)]
    await asyncio.gather(*calls)
    allowed = world.read_settings()["permissions"]
    assert isinstance(allowed, dict)
    assert len(allowed["allow"]) == 1
    assert allowed["allow"][0] in {f"Tool{n}" for n in range(8)}
    assert len(world.changes) == 8


def test_an_atomic_write_keeps_a_symlink_and_the_file_mode(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}")
    real.chmod(0o640)
    link = tmp_path / "config" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)

    write_atomically(link, {"permissions": {"allow": ["Read"]}})

    assert link.is_symlink()
    assert json.loads(real.read_text()) == {"permissions": {"allow": ["Read"]}}
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert os.listdir(real.parent) == ["settings.json"]  # no temporary file left behind


def test_a_new_settings_file_is_private(tmp_path: Path) -> None:
    target = tmp_path / "new" / "settings.json"
    write_atomically(target, {})
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


async def _rules_for(world: ConfigWorld, cwd: str) -> list[Rule]:
    return list((await world.rules.ruleset_for(cwd)).rules)
