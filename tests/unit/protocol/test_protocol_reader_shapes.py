# ruff: noqa: E501 - the lines below are real CLI output kept whole, wider than 100 columns
"""ProtocolReader on REAL Claude Code 2.1.330 stdout lines (docs/PROTOCOL.md#messages-read),
table-style."""

from __future__ import annotations

from typing import Any

import pytest

from betcode.protocol.kinds import describe, message_kind
from betcode.protocol.messages import (
    AssistantMessage,
    CanUseTool,
    CommandLifecycle,
    ControlCancelRequest,
    ControlRequest,
    ControlResponse,
    ConversationReset,
    Dialect,
    HookCallback,
    KeepAlive,
    McpMessage,
    OtherControlRequest,
    PermissionDenial,
    Result,
    StreamEvent,
    SystemInit,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
    UserMessage,
)
from betcode.protocol.reader import ProtocolReader

SID = "cd2f9550-5d1c-4a3e-9b1f-0c8d2e7a4b11"

SYSTEM_INIT = (
    '{"type":"system","subtype":"init","cwd":"/scratch/repo","session_id":"' + SID + '",'
    '"tools":["Task","AskUserQuestion","Bash","CronCreate","Edit","Read","Write"],'
    '"mcp_servers":[],"model":"claude-opus-5-5","permissionMode":"default",'
    '"slash_commands":["deep-research"],"terminal_slash_commands":["doctor"],'
    '"apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.330","output_style":"default",'
    '"agents":["claude","Explore","general-purpose"],"skills":[],'
    '"plugins":[{"name":"cc-plugin-agents-md","path":"builtin","source":"cc-plugin-agents-md@builtin"}],'
    '"capabilities":["interrupt_receipt_v1","msg_lifecycle_v1"],"analytics_disabled":true,'
    '"uuid":"2ba53dce-0000-4000-8000-000000000001","memory_paths":{"auto":"/h/.claude/memory/"},'
    '"fast_mode_state":"off","user_message_uuids":["aaaaaaaa-0000-4000-8000-000000000001"]}'
)

RESULT_SUCCESS = (
    '{"type":"result","subtype":"success","is_error":false,"result":"Hello from the mock model. plain reply.",'
    '"stop_reason":"end_turn","terminal_reason":"completed","num_turns":1,"duration_ms":147,'
    '"duration_api_ms":37,"ttft_ms":135,"session_id":"'
    + SID
    + '","uuid":"r-1","total_cost_usd":0.00014,'
    '"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5,'
    '"output_tokens_details":{"thinking_tokens":0},"service_tier":"standard","iterations":[],"fallback_credit":null},'
    '"modelUsage":{"claude-opus-5-5":{"inputTokens":10,"outputTokens":5,"costUSD":0.00014,"contextWindow":1000000}},'
    '"model_usage_since_last_result":{"claude-opus-5-5":{"inputTokens":10,"outputTokens":5}},'
    '"permission_denials":[],"fast_mode_state":"off","subagent_stats":{"spawned":0},"safety_stops":0,'
    '"api_error_status":null,"queued_turn_count":0,"result_index":0}'
)

# (id, line, expected type, expected attribute values)
CASES: list[tuple[str, str, type, dict[str, Any]]] = [
    (
        "system/init",
        SYSTEM_INIT,
        SystemInit,
        {
            "session_id": SID,
            "cwd": "/scratch/repo",
            "model": "claude-opus-5-5",
            "permission_mode": "default",
            "tools": ["Task", "AskUserQuestion", "Bash", "CronCreate", "Edit", "Read", "Write"],
            "claude_code_version": "2.1.330",
            "api_key_source": "ANTHROPIC_API_KEY",
            "capabilities": ["interrupt_receipt_v1", "msg_lifecycle_v1"],
            "user_message_uuids": ["aaaaaaaa-0000-4000-8000-000000000001"],
        },
    ),
    (
        "system/status requesting",
        '{"type":"system","subtype":"status","status":"requesting","session_id":"s1","uuid":"u1"}',
        SystemMessage,
        {"subtype": "status", "session_id": "s1", "uuid": "u1"},
    ),
    (
        "system/api_retry",
        '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":1018,'
        '"error_status":529,"error":"overloaded","session_id":"s1","uuid":"u2"}',
        SystemMessage,
        {"subtype": "api_retry"},
    ),
    (
        "stream_event message_start",
        '{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_mock_1","type":"message",'
        '"role":"assistant","model":"claude-opus-5-5","content":[],"stop_reason":null,"usage":{"input_tokens":10,'
        '"output_tokens":1}}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e1","ttft_ms":134,'
        '"thinking_display":"updates"}',
        StreamEvent,
        {"event_type": "message_start", "message_id": "msg_mock_1", "delta_type": None},
    ),
    (
        "stream_event content_block_start tool_use",
        '{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use",'
        '"id":"toolu_001","name":"Bash","input":{}}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e2",'
        '"api_message_id":"msg_mock_1"}',
        StreamEvent,
        {
            "event_type": "content_block_start",
            "index": 1,
            "block_type": "tool_use",
            "block_id": "toolu_001",
            "block_name": "Bash",
            "message_id": "msg_mock_1",
            "api_message_id": "msg_mock_1",
        },
    ),
    (
        "stream_event text_delta",
        '{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
        '"text":"Hello from"}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e3"}',
        StreamEvent,
        {
            "event_type": "content_block_delta",
            "index": 0,
            "delta_type": "text_delta",
            "text": "Hello from",
        },
    ),
    (
        "stream_event input_json_delta",
        '{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        '"partial_json":"{\\"command\\": \\"ls"}},"session_id":"s1","parent_tool_use_id":"toolu_agent","uuid":"e4"}',
        StreamEvent,
        {
            "delta_type": "input_json_delta",
            "partial_json": '{"command": "ls',
            "parent_tool_use_id": "toolu_agent",
        },
    ),
    (
        "stream_event thinking_delta",
        '{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta",'
        '"thinking":"Let me think"}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e5","thinking_display":"updates"}',
        StreamEvent,
        {"delta_type": "thinking_delta", "thinking": "Let me think", "text": None},
    ),
    (
        "stream_event message_delta",
        '{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"output_tokens":5}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e6"}',
        StreamEvent,
        {"event_type": "message_delta", "delta_type": ""},
    ),
    (
        "stream_event synthesized message_stop",
        '{"type":"stream_event","event":{"type":"message_stop","abandoned_blocks":{"api_message_id":"msg_x",'
        '"from_block_index":1}},"session_id":"s1","parent_tool_use_id":null,"uuid":"e7"}',
        StreamEvent,
        {"event_type": "message_stop", "index": None},
    ),
    (
        "assistant tool_use",
        '{"type":"assistant","message":{"id":"msg_mock_2","type":"message","role":"assistant","model":"claude-opus-5-5",'
        '"content":[{"type":"tool_use","id":"toolu_001","name":"Bash","input":{"command":"python3 -c \\"print(\'hello-from-bash\')\\"",'
        '"description":"Say hello"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1},'
        '"context_management":null},"parent_tool_use_id":null,"session_id":"3fc6896c","uuid":"7616ca82",'
        '"timestamp":"2026-11-21T23:14:37.860Z","request_id":"req_mock_3"}',
        AssistantMessage,
        {
            "content": [
                ToolUseBlock(
                    id="toolu_001",
                    name="Bash",
                    input={
                        "command": "python3 -c \"print('hello-from-bash')\"",
                        "description": "Say hello",
                    },
                )
            ],
            "message_id": "msg_mock_2",
            "model": "claude-opus-5-5",
            "stop_reason": None,
            "usage": Usage(input_tokens=10, output_tokens=1),
            "session_id": "3fc6896c",
            "uuid": "7616ca82",
            "request_id": "req_mock_3",
            "is_api_error": False,
        },
    ),
    (
        "assistant thinking",
        '{"type":"assistant","message":{"id":"msg_t","model":"claude-opus-5-5","role":"assistant","content":[{"type":"thinking",'
        '"thinking":"hmm","signature":"sig=="}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"s","uuid":"u",'
        '"thinking_duration_ms":12,"thinking_display":"updates"}',
        AssistantMessage,
        {"content": [ThinkingBlock(thinking="hmm", signature="sig==")]},
    ),
    (
        "assistant synthetic API error",
        '{"type":"assistant","message":{"diagnostics":null,"id":"3908785c","container":null,"model":"<synthetic>",'
        '"role":"assistant","stop_details":null,"stop_reason":"stop_sequence","stop_sequence":"","type":"message",'
        '"usage":{"input_tokens":0,"output_tokens":0},"content":[{"type":"text","text":"API Error: 400 mock bad request"}],'
        '"context_management":null},"parent_tool_use_id":null,"session_id":"s","uuid":"u","timestamp":"t",'
        '"error":"unknown","request_id":"req_mock_72","is_api_error_message":true,"api_error_status":400,'
        '"api_error_type":"invalid_request_error"}',
        AssistantMessage,
        {
            "model": "<synthetic>",
            "is_api_error": True,
            "api_error_status": 400,
            "error": "unknown",
            "stop_reason": "stop_sequence",
            "content": [TextBlock(text="API Error: 400 mock bad request")],
        },
    ),
    (
        "assistant interrupted partial",
        '{"type":"assistant","message":{"id":"m","model":"x","content":[{"type":"text","text":"par"}]},'
        '"aborted":true,"session_id":"s","uuid":"u","parent_tool_use_id":"toolu_a","agent_id":"ag1"}',
        AssistantMessage,
        {"aborted": True, "parent_tool_use_id": "toolu_a", "agent_id": "ag1"},
    ),
    (
        "user tool_result",
        '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_001","type":"tool_result",'
        '"content":"hello-from-bash","is_error":false}]},"parent_tool_use_id":null,"session_id":"s","uuid":"u",'
        '"timestamp":"t","tool_use_result":{"stdout":"hello-from-bash","stderr":"","interrupted":false,'
        '"isImage":false,"noOutputExpected":false},"tool_result_meta":[{"id":"toolu_001",'
        '"permission_decision":{"decision":"accept","source":"user_temporary"}}]}',
        UserMessage,
        {
            "content": [
                ToolResultBlock(tool_use_id="toolu_001", content="hello-from-bash", is_error=False)
            ],
            "tool_use_result": {
                "stdout": "hello-from-bash",
                "stderr": "",
                "interrupted": False,
                "isImage": False,
                "noOutputExpected": False,
            },
            "is_replay": False,
        },
    ),
    (
        "user denied tool_result",
        '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_019","type":"tool_result",'
        '"content":"Daemon says no","is_error":true}]},"parent_tool_use_id":null,"session_id":"s","uuid":"u",'
        '"tool_use_result":"Error: Daemon says no"}',
        UserMessage,
        {
            "content": [
                ToolResultBlock(tool_use_id="toolu_019", content="Daemon says no", is_error=True)
            ],
            "tool_use_result": "Error: Daemon says no",
        },
    ),
    (
        "user tool_result with list content",
        '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":'
        '[{"type":"tool_reference","tool_name":"ExitPlanMode"},{"type":"text","text":"a"},{"type":"text","text":"b"}]}]},'
        '"session_id":"s","uuid":"u"}',
        UserMessage,
        {"content": [ToolResultBlock(tool_use_id="t1", content="a\nb")]},
    ),
    (
        "user interrupt marker",
        '{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},'
        '"parent_tool_use_id":null,"session_id":"s","uuid":"u"}',
        UserMessage,
        {"content": [TextBlock(text="[Request interrupted by user]")]},
    ),
    (
        "user local-command replay with string content",
        '{"type":"user","message":{"role":"user","content":"<local-command-stdout>Set model to sonnet</local-command-stdout>"},'
        '"session_id":"s","uuid":"u","isReplay":true,"timestamp":"t"}',
        UserMessage,
        {
            "content": [
                TextBlock(text="<local-command-stdout>Set model to sonnet</local-command-stdout>")
            ],
            "is_replay": True,
        },
    ),
    (
        "user synthetic with an image block",
        '{"type":"user","message":{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]},'
        '"session_id":"s","uuid":"u","isSynthetic":true}',
        UserMessage,
        {
            "content": [
                UnknownBlock(type="image", raw={"type": "image", "source": {"type": "base64"}})
            ],
            "is_synthetic": True,
        },
    ),
    (
        "control_request can_use_tool (all fields)",
        '{"type":"control_request","request_id":"41749186","request":{"subtype":"can_use_tool","tool_name":"Bash",'
        '"display_name":"Bash","input":{"command":"python3 -c \\"print(\'hello-from-bash\')\\"","description":"Say hello"},'
        '"description":"Say hello","permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash",'
        '"ruleContent":"python3 -c \\"print(\'hello-from-bash\')\\""}],"behavior":"allow","destination":"localSettings"}],'
        '"decision_reason":"This command requires approval","decision_reason_type":"other","tool_use_id":"toolu_001",'
        '"blocked_path":"/etc/ssl","agent_id":"main"}}',
        ControlRequest,
        {
            "request_id": "41749186",
            "subtype": "can_use_tool",
            "dialect": Dialect.STREAM_JSON,
            "request": CanUseTool(
                tool_name="Bash",
                input={
                    "command": "python3 -c \"print('hello-from-bash')\"",
                    "description": "Say hello",
                },
                tool_use_id="toolu_001",
                display_name="Bash",
                description="Say hello",
                permission_suggestions=[
                    {
                        "type": "addRules",
                        "rules": [
                            {
                                "toolName": "Bash",
                                "ruleContent": "python3 -c \"print('hello-from-bash')\"",
                            }
                        ],
                        "behavior": "allow",
                        "destination": "localSettings",
                    }
                ],
                decision_reason="This command requires approval",
                decision_reason_type="other",
                blocked_path="/etc/ssl",
                agent_id="main",
            ),
        },
    ),
    (
        "control_request ExitPlanMode",
        '{"type":"control_request","request_id":"r2","request":{"subtype":"can_use_tool","tool_name":"ExitPlanMode",'
        '"input":{"plan":"# Plan\\n1. create foo.txt\\n","planFilePath":"/h/.claude/plans/p.md"},"tool_use_id":"t2",'
        '"requires_user_interaction":true}}',
        ControlRequest,
        {
            "request": CanUseTool(
                tool_name="ExitPlanMode",
                input={
                    "plan": "# Plan\n1. create foo.txt\n",
                    "planFilePath": "/h/.claude/plans/p.md",
                },
                tool_use_id="t2",
                requires_user_interaction=True,
            )
        },
    ),
    (
        "control_request hook_callback",
        '{"type":"control_request","request_id":"c99a4f8d","request":{"subtype":"hook_callback","callback_id":"hk_pre",'
        '"input":{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_253"},"tool_use_id":"toolu_253"}}',
        ControlRequest,
        {
            "subtype": "hook_callback",
            "request": HookCallback(
                callback_id="hk_pre",
                input={
                    "hook_event_name": "PreToolUse",
                    "tool_name": "Bash",
                    "tool_use_id": "toolu_253",
                },
                tool_use_id="toolu_253",
            ),
        },
    ),
    (
        "control_request mcp_message",
        '{"type":"control_request","request_id":"m1","request":{"subtype":"mcp_message","server_name":"srv",'
        '"message":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}}',
        ControlRequest,
        {
            "request": McpMessage(
                server_name="srv", message={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            )
        },
    ),
    (
        "control_request other subtype",
        '{"type":"control_request","request_id":"o1","request":{"subtype":"elicitation","prompt":"x"}}',
        ControlRequest,
        {
            "request": OtherControlRequest(
                subtype="elicitation", raw={"subtype": "elicitation", "prompt": "x"}
            )
        },
    ),
    (
        "control_cancel_request",
        '{"type":"control_cancel_request","request_id":"17c475c9"}',
        ControlCancelRequest,
        {"request_id": "17c475c9"},
    ),
    (
        "control_response success",
        '{"type":"control_response","response":{"subtype":"success","request_id":"int_1","response":{"still_queued":[]}}}',
        ControlResponse,
        {
            "request_id": "int_1",
            "subtype": "success",
            "response": {"still_queued": []},
            "is_error": False,
        },
    ),
    (
        "control_response error",
        '{"type":"control_response","response":{"subtype":"error","request_id":"spm_2","error":"Cannot set permission mode: '
        'must be one of acceptEdits, auto, bypassPermissions, default, dontAsk, plan","error_code":"invalid_mode"}}',
        ControlResponse,
        {"request_id": "spm_2", "is_error": True, "error_code": "invalid_mode", "response": None},
    ),
    (
        "result success",
        RESULT_SUCCESS,
        Result,
        {
            "subtype": "success",
            "is_error": False,
            "result": "Hello from the mock model. plain reply.",
            "stop_reason": "end_turn",
            "terminal_reason": "completed",
            "num_turns": 1,
            "duration_ms": 147,
            "duration_api_ms": 37,
            "session_id": SID,
            "total_cost_usd": 0.00014,
            "usage": Usage(input_tokens=10, output_tokens=5),
            "model_usage": {
                "claude-opus-5-5": {
                    "inputTokens": 10,
                    "outputTokens": 5,
                    "costUSD": 0.00014,
                    "contextWindow": 1000000,
                }
            },
            "model_usage_since_last_result": {
                "claude-opus-5-5": {"inputTokens": 10, "outputTokens": 5}
            },
            "permission_denials": [],
            "result_index": 0,
            "api_error_status": None,
        },
    ),
    (
        "result API error (success + is_error)",
        '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 400 mock bad request",'
        '"terminal_reason":"api_error","api_error_status":400,"num_turns":1,"session_id":"s","total_cost_usd":0}',
        Result,
        {
            "subtype": "success",
            "is_error": True,
            "api_error_status": 400,
            "terminal_reason": "api_error",
        },
    ),
    (
        "result error_during_execution with denials",
        '{"type":"result","subtype":"error_during_execution","is_error":true,"terminal_reason":"aborted_tools",'
        '"stop_reason":"tool_use","errors":["[ede_diagnostic] result_type=user"],"num_turns":3,"session_id":"s",'
        '"permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_019","tool_input":{"command":"rm x"}}],'
        '"origin":{"kind":"task-notification","producer":"session-task"},"user_message_uuid":"aaaa"}',
        Result,
        {
            "subtype": "error_during_execution",
            "is_error": True,
            "result": None,
            "errors": ["[ede_diagnostic] result_type=user"],
            "permission_denials": [
                PermissionDenial(
                    tool_name="Bash", tool_use_id="toolu_019", tool_input={"command": "rm x"}
                )
            ],
            "origin_kind": "task-notification",
            "user_message_uuids": ["aaaa"],
        },
    ),
    ("keep_alive", '{"type":"keep_alive"}', KeepAlive, {}),
    (
        "command_lifecycle",
        '{"type":"command_lifecycle","command_uuid":"aaaaaaaa","state":"queued","uuid":"u","session_id":"s"}',
        CommandLifecycle,
        {"command_uuid": "aaaaaaaa", "state": "queued"},
    ),
    (
        "conversation_reset",
        '{"type":"conversation_reset","new_conversation_id":"7d385bb1","uuid":"7d385bb1","trigger":"clear",'
        '"user_message_uuid":"x","timestamp":"t","session_id":"old"}',
        ConversationReset,
        {"new_conversation_id": "7d385bb1", "trigger": "clear", "session_id": "old"},
    ),
]


@pytest.mark.parametrize(
    ("line", "expected_type", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_real_shapes(line: str, expected_type: type, expected: dict[str, Any]) -> None:
    reader = ProtocolReader()
    message = reader.decode(line.encode())
    assert type(message) is expected_type
    for name, value in expected.items():
        assert getattr(message, name) == value, name
    assert reader.stats.parse_errors_tolerated == 0
    assert not reader.stats.unknown_types


KIND_CASES = [
    (SYSTEM_INIT, {"kind": "system_init"}),
    ('{"type":"system","subtype":"status","status":null}', {"kind": "system", "subtype": "status"}),
    (
        '{"type":"control_request","request_id":"a","request":{"subtype":"can_use_tool","tool_name":"Read"}}',
        {"kind": "control_request", "subtype": "can_use_tool", "tool_name": "Read"},
    ),
    (
        '{"type":"control_request","request_id":"a","request":{"subtype":"hook_callback"}}',
        {"kind": "control_request", "subtype": "hook_callback"},
    ),
    (RESULT_SUCCESS, {"kind": "result", "subtype": "success", "is_error": False}),
    (
        '{"type":"command_lifecycle","state":"started"}',
        {"kind": "system", "subtype": "command_lifecycle"},
    ),
    ('{"type":"rate_limit_event","x":1}', {"kind": "unknown", "type": "rate_limit_event"}),
    ('{"type":"control_cancel_request","request_id":"c"}', {"kind": "control_cancel_request"}),
    ('{"type":"control_response","response":{"request_id":"c"}}', {"kind": "control_response"}),
    ('{"type":"keep_alive"}', {"kind": "keep_alive"}),
    ('{"type":"user","message":{"content":"x"}}', {"kind": "user", "blocks": ["text"]}),
    (
        '{"type":"assistant","message":{"content":[{"type":"tool_use"},{"type":"server_tool_use"}]}}',
        {"kind": "assistant", "blocks": ["tool_use", "server_tool_use"]},
    ),
]


@pytest.mark.parametrize(("line", "expected"), KIND_CASES)
def test_kinds(line: str, expected: dict[str, Any]) -> None:
    message = ProtocolReader().decode(line.encode())
    assert message is not None
    description = describe(message)
    assert description["kind"] == message_kind(message)
    assert description | expected == description
