"""Spot checks of the generated descriptors against the upstream mirror's shapes
(docs/GRPC.md#upstream-compatibility).

A failure here means a .proto edit broke wire compatibility with upstream BetCode clients.
"""

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

from betcode.v1 import (
    agent_pb2,
    auth_pb2,
    commands_pb2,
    common_pb2,
    config_pb2,
    git_repo_pb2,
    gitlab_pb2,
    health_pb2,
    machine_pb2,
    plugin_pb2,
    tunnel_pb2,
    version_pb2,
    worktree_pb2,
)

MIRROR_SERVICES = {
    "AgentService": (
        agent_pb2,
        "Converse ListSessions ResumeSession CompactSession CancelTurn RequestInputLock "
        "ExchangeKeys ListSessionGrants ClearSessionGrants SetSessionGrant RenameSession",
    ),
    "Health": (health_pb2, "Check Watch"),
    "BetCodeHealth": (health_pb2, "GetHealthDetails"),
    "WorktreeService": (
        worktree_pb2,
        "CreateWorktree RemoveWorktree ListWorktrees GetWorktree",
    ),
    "ConfigService": (
        config_pb2,
        "GetSettings UpdateSettings ListMcpServers GetPermissions",
    ),
    "CommandService": (
        commands_pb2,
        "GetCommandRegistry ListAgents ListPath ExecuteServiceCommand ListPlugins "
        "GetPluginStatus AddPlugin RemovePlugin EnablePlugin DisablePlugin",
    ),
    "VersionService": (version_pb2, "GetVersion NegotiateCapabilities"),
    "GitRepoService": (
        git_repo_pb2,
        "RegisterRepo UnregisterRepo ListRepos GetRepo UpdateRepo ScanRepos",
    ),
    "TunnelService": (tunnel_pb2, "OpenTunnel Register Heartbeat"),
    "MachineService": (
        machine_pb2,
        "RegisterMachine ListMachines RemoveMachine GetMachine",
    ),
    "AuthService": (auth_pb2, "Login Register RefreshToken RevokeToken"),
    "GitLabService": (
        gitlab_pb2,
        "ListMergeRequests GetMergeRequest ListPipelines GetPipeline ListIssues GetIssue",
    ),
    "PluginService": (plugin_pb2, "Register Execute PluginHealthCheck"),
}

# (method, request, response, client streams, server streams)
AGENT_SERVICE_METHODS = [
    ("Converse", "AgentRequest", "AgentEvent", True, True),
    ("ListSessions", "ListSessionsRequest", "ListSessionsResponse", False, False),
    ("ResumeSession", "ResumeSessionRequest", "AgentEvent", False, True),
    ("CompactSession", "CompactSessionRequest", "CompactSessionResponse", False, False),
    ("CancelTurn", "CancelTurnRequest", "CancelTurnResponse", False, False),
    ("RequestInputLock", "InputLockRequest", "InputLockResponse", False, False),
    ("ExchangeKeys", "KeyExchangeRequest", "KeyExchangeResponse", False, False),
    ("ListSessionGrants", "ListSessionGrantsRequest", "ListSessionGrantsResponse", False, False),
    ("ClearSessionGrants", "ClearSessionGrantsRequest", "ClearSessionGrantsResponse", False, False),
    ("SetSessionGrant", "SetSessionGrantRequest", "SetSessionGrantResponse", False, False),
    ("RenameSession", "RenameSessionRequest", "RenameSessionResponse", False, False),
    # BetCode additions
    ("DeleteSession", "DeleteSessionRequest", "DeleteSessionResponse", False, False),
    ("ResumeSessionBatched", "ResumeSessionRequest", "AgentEventBatch", False, True),
    (
        "ListPendingPermissions",
        "ListPendingPermissionsRequest",
        "ListPendingPermissionsResponse",
        False,
        False,
    ),
    ("AnswerPermission", "AnswerPermissionRequest", "AnswerPermissionResponse", False, False),
]

_T = FieldDescriptor
SCALAR = {
    _T.TYPE_STRING: "string",
    _T.TYPE_BOOL: "bool",
    _T.TYPE_UINT64: "uint64",
    _T.TYPE_UINT32: "uint32",
    _T.TYPE_BYTES: "bytes",
    _T.TYPE_FLOAT: "float",
    _T.TYPE_DOUBLE: "double",
}

# message → {number: (name, type as the upstream mirror writes it)}; "[]T" repeated, "map<K,V>" map,
# "opt T" proto3 optional.
FIELDS = {
    agent_pb2.AgentEvent.DESCRIPTOR: {
        1: ("sequence", "uint64"),
        2: ("timestamp", "google.protobuf.Timestamp"),
        3: ("parent_tool_use_id", "string"),
        10: ("text_delta", "TextDelta"),
        11: ("tool_call_start", "ToolCallStart"),
        12: ("tool_call_result", "ToolCallResult"),
        13: ("permission_request", "PermissionRequest"),
        14: ("user_question", "UserQuestion"),
        15: ("todo_update", "TodoUpdate"),
        16: ("status_change", "StatusChange"),
        17: ("session_info", "SessionInfo"),
        18: ("error", "ErrorEvent"),
        19: ("usage", "UsageReport"),
        20: ("plan_mode", "PlanModeChange"),
        21: ("turn_complete", "TurnComplete"),
        22: ("user_input", "UserInput"),
        23: ("encrypted", "EncryptedEnvelope"),
        24: ("permission_resolved", "PermissionResolved"),
        25: ("input_lock", "InputLockChange"),
        26: ("permission_reminder", "PermissionReminder"),
        27: ("input_lock_requested", "InputLockRequested"),
    },
    agent_pb2.StartConversation.DESCRIPTOR: {
        1: ("session_id", "string"),
        2: ("working_directory", "string"),
        3: ("model", "string"),
        4: ("allowed_tools", "[]string"),
        5: ("plan_mode", "bool"),
        6: ("worktree_id", "string"),
        7: ("metadata", "map<string,string>"),
        8: ("from_sequence", "opt uint64"),
        9: ("client_type", "string"),
    },
    agent_pb2.PermissionResponse.DESCRIPTOR: {
        1: ("request_id", "string"),
        2: ("decision", "PermissionDecision"),
        3: ("updated_input", "google.protobuf.Struct"),
        4: ("message", "string"),
        5: ("idempotency_key", "string"),
    },
    agent_pb2.UserQuestion.DESCRIPTOR: {
        1: ("question_id", "string"),
        2: ("question", "string"),
        3: ("options", "[]QuestionOption"),
        4: ("multi_select", "bool"),
        5: ("is_replay", "bool"),
        6: ("questions", "[]QuestionPrompt"),
    },
    agent_pb2.ResumeSessionRequest.DESCRIPTOR: {
        1: ("session_id", "string"),
        2: ("from_sequence", "uint64"),
        3: ("follow", "opt bool"),  # BetCode addition: ResumeSession follows live only if set
    },
    health_pb2.HealthDetailsResponse.DESCRIPTOR: {
        1: ("overall_status", "ServingStatus"),
        2: ("components", "[]ComponentHealth"),
        3: ("metadata", "map<string,string>"),
        4: ("degraded", "bool"),
        5: ("degraded_reason", "string"),
        10: ("claude_code", "ClaudeCodeStatus"),
    },
}

ENUMS = {
    "AgentStatus": (
        common_pb2,
        "AGENT_STATUS_UNSPECIFIED AGENT_STATUS_THINKING AGENT_STATUS_EXECUTING_TOOL "
        "AGENT_STATUS_WAITING_FOR_USER AGENT_STATUS_IDLE AGENT_STATUS_COMPACTING "
        "AGENT_STATUS_ERROR AGENT_STATUS_RESTARTING AGENT_STATUS_CRASHED AGENT_STATUS_QUEUED",
    ),
    "PermissionDecision": (
        common_pb2,
        "PERMISSION_DECISION_UNSPECIFIED PERMISSION_DECISION_ALLOW_ONCE "
        "PERMISSION_DECISION_ALLOW_SESSION PERMISSION_DECISION_DENY "
        "PERMISSION_DECISION_ALLOW_WITH_EDIT PERMISSION_DECISION_DENY_NO_INTERRUPT "
        "PERMISSION_DECISION_DENY_WITH_INTERRUPT",
    ),
    "ServingStatus": (health_pb2, "UNKNOWN SERVING NOT_SERVING SERVICE_UNKNOWN"),
    "CompatibilityLevel": (
        version_pb2,
        "COMPATIBILITY_UNKNOWN FULLY_COMPATIBLE LIKELY_COMPATIBLE DEGRADED INCOMPATIBLE",
    ),
}


def _wire_type(field: FieldDescriptor) -> str:
    """The field's type as the upstream mirror writes it."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields
        return f"map<{_wire_type(key)},{_wire_type(value)}>"
    if field.message_type is not None:
        name = _short(field.message_type)
    elif field.enum_type is not None:
        name = field.enum_type.name
    else:
        name = SCALAR[field.type]
    if field.is_repeated:
        return f"[]{name}"
    if _is_proto3_optional(field):
        return f"opt {name}"
    return name


def _is_proto3_optional(field: FieldDescriptor) -> bool:
    message_proto = descriptor_pb2.DescriptorProto()
    assert field.containing_type is not None, field.full_name
    field.containing_type.CopyToProto(message_proto)
    return any(f.proto3_optional for f in message_proto.field if f.number == field.number)


def _short(message: Descriptor) -> str:
    return message.name if message.full_name.startswith("betcode.") else message.full_name


def test_the_thirteen_mirror_services_have_the_mirror_methods() -> None:
    for service_name, (module, methods) in MIRROR_SERVICES.items():
        service: ServiceDescriptor = module.DESCRIPTOR.services_by_name[service_name]
        assert service.full_name == f"betcode.v1.{service_name}"
        names = [method.name for method in service.methods]
        # Mirror methods come first, in mirror order; additions only follow them.
        assert names[: len(methods.split())] == methods.split(), service_name


@pytest.mark.parametrize("row", AGENT_SERVICE_METHODS, ids=lambda row: row[0])
def test_agent_service_method_shapes(row: tuple[str, str, str, bool, bool]) -> None:
    name, request, response, client_streams, server_streams = row
    method = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].methods_by_name[name]
    assert method.full_name == f"betcode.v1.AgentService.{name}"
    assert (method.input_type.name, method.output_type.name) == (request, response)
    assert (method.client_streaming, method.server_streaming) == (client_streams, server_streams)


@pytest.mark.parametrize("message", list(FIELDS), ids=lambda message: message.name)
def test_message_field_numbers_and_types(message: Descriptor) -> None:
    actual = {field.number: (field.name, _wire_type(field)) for field in message.fields}
    assert actual == FIELDS[message]


def test_agent_event_payloads_share_one_oneof() -> None:
    oneof = agent_pb2.AgentEvent.DESCRIPTOR.oneofs_by_name["event"]
    assert sorted(field.number for field in oneof.fields) == list(range(10, 28))


@pytest.mark.parametrize("enum_name", list(ENUMS))
def test_enum_values_are_numbered_in_order(enum_name: str) -> None:
    module, values = ENUMS[enum_name]
    enum = module.DESCRIPTOR.enum_types_by_name[enum_name]
    assert [(value.name, value.number) for value in enum.values] == [
        (name, number) for number, name in enumerate(values.split())
    ]
