"""betcode.v1.ConfigService: the daemon's settings and the permission rules it applies.

Settings. `GetSettings` answers the daemon settings resolved from the built-in defaults,
`<config dir>/settings.json` and the environment; `Settings.entries` (a BetCode addition) lists
every setting with its value, origin and allowed values. The mirror's fields map onto them:

| field | setting |
|---|---|
| daemon.max_subprocesses | daemon.max_sessions (one claude process per session at most) |
| daemon.log_level, daemon.max_payload_bytes | the settings of the same name |
| permissions.{connected,disconnected}_timeout_secs | daemon.permission.ttl_seconds (one TTL) |
| permissions.activity_refresh_enabled | daemon.permission.extend_on_activity |
| daemon.socket_path, daemon.port, daemon.database_path | fixed when the daemon started |

The other fields name things BetCode has no setting for (claude itself chooses the model and
compacts; tools are approved by permission rules, not a blanket auto-approve), and are left empty.

`UpdateSettings` is read-modify-write: send what `GetSettings` returned, changed. A field that
still holds the current value, a zero number or an empty string changes nothing; a boolean in
a group that is present is taken as given. `entries` may change any setting by key (value as
JSON; durations also as "90s", "7d"). A change is validated like the file at daemon start; a bad
value answers INVALID_ARGUMENT naming the key, the value and the allowed range, and the file is
left untouched. A written change takes effect as a SIGHUP reload would.

Permission rules. `GetPermissions` answers the rules of `<config dir>/settings.json`, or with a
`session_id` every rule that applies to that session (all layers, as the bridge uses them).
Rules that cannot be used are listed too, with action UNSPECIFIED and the reason in
`description`. `UpdatePermissions` (a BetCode addition) replaces the allow/deny/ask lists of
`<config dir>/settings.json`; the next permission request uses them.

`scope` must be empty or "user": the config dir's file is the only one BetCode writes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
from google.protobuf.descriptor import FieldDescriptor

from betcode.config.errors import ConfigError
from betcode.config.layers import RuleListName
from betcode.config.resolve import ResolvedSettings
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.permissions.rulebook import RuleBook
from betcode.permissions.rules import InvalidRule, Rule, RuleList, format_rule
from betcode.server.config_store import ConfigStore, RejectedChange
from betcode.server.errors import abort, handles_errors
from betcode.sessions.manager import InvalidSessionRequest, SessionNotFound
from betcode.storage.sessions import SessionRecord
from betcode.v1 import config_pb2

Action = config_pb2.PermissionAction
ACTION_OF_LIST = {
    RuleList.DENY: Action.PERMISSION_ACTION_DENY,
    RuleList.ASK: Action.PERMISSION_ACTION_ASK,
    RuleList.ALLOW: Action.PERMISSION_ACTION_ALLOW,
}
LIST_OF_ACTION: dict[int, RuleListName] = {
    Action.PERMISSION_ACTION_DENY: "deny",
    Action.PERMISSION_ACTION_ASK: "ask",
    Action.PERMISSION_ACTION_ALLOW: "allow",
}
# Deny is checked first, then ask, then allow; a higher priority decides first.
PRIORITY_OF_LIST = {RuleList.DENY: 3, RuleList.ASK: 2, RuleList.ALLOW: 1}
SCOPES = ("", "user")

# (group, field) of the mirror's Settings -> the setting it shows.
MAPPED_FIELDS: dict[tuple[str, str], str] = {
    ("daemon", "max_subprocesses"): "daemon.max_sessions",
    ("daemon", "log_level"): "daemon.log_level",
    ("daemon", "max_payload_bytes"): "daemon.max_payload_bytes",
    ("permissions", "connected_timeout_secs"): "daemon.permission.ttl_seconds",
    ("permissions", "disconnected_timeout_secs"): "daemon.permission.ttl_seconds",
    ("permissions", "activity_refresh_enabled"): "daemon.permission.extend_on_activity",
}
FIXED_AT_START = {
    ("daemon", "socket_path"): "--socket / BETCODE_SOCKET",
    ("daemon", "port"): "--listen",
    ("daemon", "database_path"): "--data-dir / BETCODE_DATA_DIR",
}
NO_SUCH_SETTING = {
    "sessions": "claude chooses the model and compacts by its own settings",
    "permissions": "tools are approved by permission rules (UpdatePermissions)",
    "feature_flags": "features are fixed by the daemon's version (VersionService)",
}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the daemon fixed at startup."""

    socket_path: Path
    database_path: Path
    tcp_port: Callable[[], int | None]


class SessionRecords(Protocol):
    async def record(self, session_id: str) -> SessionRecord:
        """The stored session; SessionNotFound / InvalidSessionRequest otherwise."""


class ConfigService:
    """betcode.v1.ConfigService (module doc). `on_change` runs after every written change;
    the daemon passes its SIGHUP reload, which applies the settings and makes the rule book
    re-read its files. `settings_overrides` are the daemon's `--set` flags."""

    def __init__(
        self,
        *,
        config_dir: Path,
        environ: Mapping[str, str],
        rules: RuleBook,
        sessions: SessionRecords,
        facts: ServerFacts,
        on_change: Callable[[], None],
        settings_overrides: Mapping[str, object] | None = None,
    ) -> None:
        self._store = ConfigStore(config_dir, environ, settings_overrides)
        self._rules = rules
        self._sessions = sessions
        self._facts = facts
        self._on_change = on_change
        self._writing = asyncio.Lock()  # one read-validate-write at a time

    @handles_errors
    async def GetSettings(
        self, request: config_pb2.GetSettingsRequest, context: grpc.aio.ServicerContext
    ) -> config_pb2.Settings:
        _check_scope(request.scope)
        return self._settings_message(await self._resolve(context))

    @handles_errors
    async def UpdateSettings(
        self, request: config_pb2.UpdateSettingsRequest, context: grpc.aio.ServicerContext
    ) -> config_pb2.Settings:
        _check_scope(request.scope)
        async with self._writing:
            current = await self._resolve(context)
            shown = self._settings_message(current)
            changes = requested_changes(request.settings, shown, current)
            if changes:
                await self._write(context, lambda: self._store.change_settings(changes))
            return self._settings_message(await self._resolve(context))

    @handles_errors
    async def ListMcpServers(
        self, request: config_pb2.ListMcpServersRequest, context: grpc.aio.ServicerContext
    ) -> config_pb2.ListMcpServersResponse:
        raise BetCodeError(
            ErrorCode.NOT_IMPLEMENTED,
            "BetCode does not run MCP servers: claude starts them from its own settings "
            "(.mcp.json, ~/.claude.json); `claude mcp list` shows them",
        )

    @handles_errors
    async def GetPermissions(
        self, request: config_pb2.GetPermissionsRequest, context: grpc.aio.ServicerContext
    ) -> config_pb2.PermissionRules:
        if not request.session_id:
            return await self._file_rules(context)
        try:
            record = await self._sessions.record(request.session_id)
        except SessionNotFound as error:
            raise BetCodeError(
                ErrorCode.SESSION_NOT_FOUND, str(error), {"session_id": request.session_id}
            ) from None
        except InvalidSessionRequest as error:
            raise BetCodeError(ErrorCode.INVALID_REQUEST, str(error)) from None
        loaded = await self._rules.rules_for(record.working_directory)
        return rules_message(loaded.ruleset.rules, loaded.invalid)

    @handles_errors
    async def UpdatePermissions(
        self, request: config_pb2.UpdatePermissionsRequest, context: grpc.aio.ServicerContext
    ) -> config_pb2.PermissionRules:
        lists = requested_rule_lists(request.permissions, str(self._store.path))
        async with self._writing:
            await self._write(context, lambda: self._store.replace_permission_rules(lists))
            return await self._file_rules(context)

    # ---- helpers ----

    async def _resolve(self, context: grpc.aio.ServicerContext) -> ResolvedSettings:
        try:
            return await asyncio.to_thread(self._store.resolve)
        except ConfigError as error:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))

    async def _file_rules(self, context: grpc.aio.ServicerContext) -> config_pb2.PermissionRules:
        try:
            ruleset, invalid = await asyncio.to_thread(self._store.permission_rules)
        except ConfigError as error:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))
        return rules_message(ruleset.rules, invalid)

    async def _write(self, context: grpc.aio.ServicerContext, change: Callable[[], None]) -> None:
        try:
            await asyncio.to_thread(change)
        except RejectedChange as rejected:
            code = (
                ErrorCode.INVALID_PERMISSION_CONFIG
                if rejected.key == "permissions"
                else ErrorCode.INVALID_REQUEST
            )
            raise BetCodeError(code, str(rejected), {"key": rejected.key}) from None
        except ConfigError as error:
            message = f"{error}; fix the file first, nothing was changed"
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, message)
        self._on_change()

    def _settings_message(self, resolved: ResolvedSettings) -> config_pb2.Settings:
        settings = resolved.settings
        ttl = round(settings.permission.ttl_seconds)
        return config_pb2.Settings(
            daemon=config_pb2.DaemonSettings(
                max_subprocesses=settings.max_sessions,
                socket_path=str(self._facts.socket_path),
                port=self._facts.tcp_port() or 0,
                database_path=str(self._facts.database_path),
                log_level=settings.log_level,
                max_payload_bytes=settings.max_payload_bytes,
            ),
            sessions=config_pb2.SessionSettings(),
            permissions=config_pb2.PermissionSettings(
                connected_timeout_secs=ttl,
                disconnected_timeout_secs=ttl,
                activity_refresh_enabled=settings.permission.extend_on_activity,
            ),
            entries=[
                config_pb2.SettingEntry(
                    key=v.key, value_json=json.dumps(v.value), origin=v.origin, allowed=v.allowed
                )
                for v in resolved.values
            ],
        )


def requested_changes(
    requested: config_pb2.Settings, shown: config_pb2.Settings, current: ResolvedSettings
) -> dict[str, object]:
    """Dotted key -> new value, for what the request changes against `shown` (what GetSettings
    answers now; module doc); BetCodeError for a field that cannot change or two that disagree."""
    changes: dict[str, tuple[str, object]] = {}  # key -> (what asked, value)

    def propose(key: str, asked_by: str, value: object) -> None:
        earlier = changes.get(key)
        if earlier is not None and earlier[1] != value:
            raise BetCodeError(
                ErrorCode.INVALID_REQUEST,
                f"{key} is asked to be {json.dumps(earlier[1])} by {earlier[0]} and "
                f"{json.dumps(value)} by {asked_by}; send one value",
                {"key": key},
            )
        changes[key] = (asked_by, value)

    for group in ("daemon", "sessions", "permissions"):
        if not requested.HasField(group):
            continue
        asked, now = getattr(requested, group), getattr(shown, group)
        for field in asked.DESCRIPTOR.fields:
            value, was = getattr(asked, field.name), getattr(now, field.name)
            if field.is_repeated:
                value, was = list(value), list(was)
            if value == was or (not value and field.type != FieldDescriptor.TYPE_BOOL):
                continue
            key = MAPPED_FIELDS.get((group, field.name))
            if key is None:
                raise _not_settable(group, field.name)
            propose(key, f"{group}.{field.name}", value)
    if requested.feature_flags and dict(requested.feature_flags) != dict(shown.feature_flags):
        raise _not_settable("feature_flags", "")
    known = {v.key: v.value for v in current.values}
    for entry in requested.entries:
        try:
            value = json.loads(entry.value_json)
        except ValueError:
            raise BetCodeError(
                ErrorCode.INVALID_REQUEST,
                f"{entry.key}: value_json {entry.value_json!r} is not JSON",
                {"key": entry.key},
            ) from None
        if entry.key not in known or json.dumps(value) != json.dumps(known[entry.key]):
            propose(entry.key, f"entries[{entry.key!r}]", value)
    return {key: value for key, (_, value) in changes.items()}


def _not_settable(group: str, name: str) -> BetCodeError:
    where = f"{group}.{name}" if name else group
    how = FIXED_AT_START.get((group, name))
    if how is not None:
        message = f"{where} is fixed when the daemon starts ({how}); restart it to change it"
    else:
        message = f"{where}: BetCode has no such setting ({NO_SUCH_SETTING[group]})"
    return BetCodeError(ErrorCode.INVALID_REQUEST, message, {"key": where})


def requested_rule_lists(
    permissions: config_pb2.PermissionRules, own_source: str
) -> dict[RuleListName, list[str]]:
    """The allow/deny/ask lists a request asks for, as Claude Code rule strings."""
    lists: dict[RuleListName, list[str]] = {"allow": [], "deny": [], "ask": []}
    for rule in permissions.rules:
        text = (
            format_rule(rule.tool_pattern, rule.path_pattern)
            if rule.path_pattern
            else (rule.tool_pattern.strip())
        )
        if rule.source and rule.source != own_source:
            raise BetCodeError(
                ErrorCode.INVALID_PERMISSION_CONFIG,
                f"rule {text!r} comes from {rule.source}: only the rules of {own_source} can be "
                "changed here; edit that file itself",
                {"rule": text},
            )
        list_name = LIST_OF_ACTION.get(rule.action)
        if list_name is None:
            action = Action.Name(rule.action)
            raise BetCodeError(
                ErrorCode.INVALID_PERMISSION_CONFIG,
                f"rule {text!r}: action {action} has no Claude Code settings list; use "
                "PERMISSION_ACTION_ALLOW, PERMISSION_ACTION_DENY or PERMISSION_ACTION_ASK",
                {"rule": text},
            )
        lists[list_name].append(text)
    lists["deny"].extend(permissions.denied_tools)
    lists["ask"].extend(permissions.require_approval)
    return lists


def rules_message(
    rules: Iterable[Rule], invalid: Iterable[InvalidRule]
) -> config_pb2.PermissionRules:
    message = config_pb2.PermissionRules()
    counters: dict[tuple[str, str], int] = {}
    for rule in rules:
        list_name = rule.source.list_name
        message.rules.append(
            config_pb2.PermissionRule(
                id=_rule_id(counters, rule.source.origin, list_name),
                tool_pattern=rule.tool_name,
                path_pattern=rule.specifier or "",
                action=ACTION_OF_LIST[list_name],
                priority=PRIORITY_OF_LIST[list_name],
                description=rule.text,
                source=rule.source.origin,
            )
        )
        if rule.specifier is None and list_name is RuleList.DENY:
            message.denied_tools.append(rule.tool_name)
        if rule.specifier is None and list_name is RuleList.ASK:
            message.require_approval.append(rule.tool_name)
    for error in invalid:
        message.rules.append(
            config_pb2.PermissionRule(
                id=_rule_id(counters, error.source.origin, error.source.list_name),
                tool_pattern=error.text,
                action=Action.PERMISSION_ACTION_UNSPECIFIED,
                description=f"invalid {error.source.list_name} rule, skipped: {error.reason}",
                source=error.source.origin,
            )
        )
    return message


def _rule_id(counters: dict[tuple[str, str], int], origin: str, list_name: str) -> str:
    """`<list>:<n>@<origin>`: unique within one answer."""
    number = counters.get((origin, list_name), 0)
    counters[(origin, list_name)] = number + 1
    return f"{list_name}:{number}@{origin}"


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise BetCodeError(
            ErrorCode.INVALID_REQUEST,
            f"scope {scope!r} is not supported: BetCode's settings live in one file, "
            '<config dir>/settings.json (scope "" or "user")',
            {"scope": scope},
        )
