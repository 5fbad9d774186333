"""The stdout messages the fake claude prints, shaped like Claude Code 2.1.330's
(docs/PROTOCOL.md#messages-read).

Pure builders returning dicts without `session_id`/`uuid`; the fake adds those. Standard library
only: the fake claude must start fast.
"""

from __future__ import annotations

import json
import os
from typing import Any

Json = dict[str, Any]

FAKE_TOOLS = ["Task", "AskUserQuestion", "Bash", "Edit", "Read", "Write"]


def system_init(model: str, permission_mode: str, version: str) -> Json:
    return {
        "type": "system",
        "subtype": "init",
        "cwd": os.getcwd(),
        "tools": FAKE_TOOLS,
        "mcp_servers": [],
        "model": model,
        "permissionMode": permission_mode,
        "apiKeySource": "none",
        "claude_code_version": version,
        "output_style": "default",
    }


def stream_event(event: Json) -> Json:
    return {"type": "stream_event", "event": event, "parent_tool_use_id": None}


def message_start(message_id: str, model: str) -> Json:
    message = {"id": message_id, "type": "message", "role": "assistant", "model": model}
    return {"type": "message_start", "message": {**message, "content": []}}


def text_block_events(text: str, deltas: int) -> tuple[list[Json], Json]:
    """(events before the assistant line, the content_block_stop that follows it)."""
    size = -(-len(text) // max(1, deltas)) or 1
    block = {"type": "text", "text": ""}
    before: list[Json] = [{"type": "content_block_start", "index": 0, "content_block": block}]
    for offset in range(0, len(text), size):
        delta = {"type": "text_delta", "text": text[offset : offset + size]}
        before.append({"type": "content_block_delta", "index": 0, "delta": delta})
    return before, {"type": "content_block_stop", "index": 0}


def tool_block_events(block: Json) -> tuple[list[Json], Json]:
    """A tool_use block's stream events: (start and its input as one input_json_delta, before
    the assistant line; the content_block_stop after it)."""
    start = {"type": "content_block_start", "index": 1, "content_block": {**block, "input": {}}}
    partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    delta = {"type": "content_block_delta", "index": 1, "delta": partial}
    return [start, delta], {"type": "content_block_stop", "index": 1}


def message_end(output_tokens: int) -> list[Json]:
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    return [{**delta, "usage": {"output_tokens": output_tokens}}, {"type": "message_stop"}]


def assistant(message_id: str, model: str, block: Json) -> Json:
    """One content block per line, stop_reason null, message_start usage: as the CLI does."""
    message: Json = {"id": message_id, "type": "message", "role": "assistant", "model": model}
    message.update(content=[block], stop_reason=None, stop_sequence=None)
    message["usage"] = {"input_tokens": 10, "output_tokens": 1}
    return {"type": "assistant", "message": message, "parent_tool_use_id": None}


def user_content(content: list[Json]) -> Json:
    return {
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": None,
    }


def tool_result(tool_use_id: str, content: str, is_error: bool) -> Json:
    block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content}
    return user_content([{**block, "is_error": is_error}])


def can_use_tool(request_id: str, tool_name: str, tool_input: Any, tool_use_id: str) -> Json:
    request: Json = {"subtype": "can_use_tool", "tool_name": tool_name, "display_name": tool_name}
    request.update(input=tool_input, tool_use_id=tool_use_id)
    request.update(decision_reason="This command requires approval", decision_reason_type="other")
    return {"type": "control_request", "request_id": request_id, "request": request}


def result(text: str | None, output_tokens: int, duration_ms: int) -> Json:
    """A success result, or (text None) the interrupted one."""
    usage = {"input_tokens": 10, "output_tokens": output_tokens}
    usage.update(cache_creation_input_tokens=0, cache_read_input_tokens=0)
    message: Json = {"type": "result", "subtype": "success", "is_error": False}
    message.update(num_turns=1, duration_ms=duration_ms, duration_api_ms=0)
    message.update(total_cost_usd=0.0, permission_denials=[], usage=usage)
    if text is not None:
        message.update(result=text, stop_reason="end_turn", terminal_reason="completed")
    else:
        message.update(subtype="error_during_execution", is_error=True, stop_reason=None)
        message.update(
            terminal_reason="aborted_streaming",
            errors=["[ede_diagnostic] interrupted by the client"],
        )
    return message


def control_success(request_id: Any, response: Json | None) -> Json:
    reply: Json = {"subtype": "success", "request_id": request_id}
    if response is not None:
        reply["response"] = response
    return {"type": "control_response", "response": reply}


def control_error(request_id: Any, error: str, error_code: str) -> Json:
    reply = {"subtype": "error", "request_id": request_id, "error": error}
    return {"type": "control_response", "response": {**reply, "error_code": error_code}}


def flood_line_head(text: str, session_id: str) -> str:
    """Everything of a text_delta stream_event line before its per-line fields."""
    delta = json.dumps({"type": "text_delta", "text": text}, separators=(",", ":"))
    return (
        '{"type":"stream_event","event":{"type":"content_block_delta","index":0,'
        f'"delta":{delta}}},"session_id":"{session_id}","parent_tool_use_id":null,'
    )


def busy_turn(steps: int) -> list[Json]:
    """A fake claude turn (script steps) of a long working session: `steps` times a remark, a
    Bash call and its output, as raw lines (for web client benchmarks and tests)."""
    turn: list[Json] = []
    for step in range(steps):
        tool_id = f"toolu_busy_{step}"
        remark = {"type": "text", "text": f"Step {step}: checking `module_{step}.py`."}
        call = {
            "type": "tool_use",
            "id": tool_id,
            "name": "Bash",
            "input": {"command": f"wc -l module_{step}.py"},
        }
        for line in (
            assistant(f"msg_busy_{step}_a", "fake", remark),
            assistant(f"msg_busy_{step}_b", "fake", call),
            tool_result(tool_id, f"{step * 7} module_{step}.py", False),
        ):
            turn.append({"do": "raw", "text": json.dumps(line)})
    return turn
