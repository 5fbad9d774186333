"""Anthropic Messages API wire shapes: SSE events, non-streaming messages, error bodies.

Pure functions: a `Reply` (with ids already assigned) in, JSON-ready dicts and bytes out.
Content is cut into several deltas, as the real API does, so clients see partial text and
partial tool input JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from betcode.devtools.mock_anthropic.replies import Block, Reply, TextBlock, ToolUseBlock

# Real API error types by HTTP status (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

TEXT_CHUNK_CHARS = 12
JSON_CHUNKS = 4


def encode_event(event: dict[str, Any]) -> bytes:
    """One SSE frame: `event: <type>` and a one-line JSON `data:`."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def split_text(text: str, chunk_chars: int = TEXT_CHUNK_CHARS) -> list[str]:
    """Cut text after whitespace once a piece reaches `chunk_chars`; pieces join back to `text`."""
    pieces: list[str] = []
    start = 0
    for index, char in enumerate(text):
        if char.isspace() and index + 1 - start >= chunk_chars:
            pieces.append(text[start : index + 1])
            start = index + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces or [""]


def split_json(serialized: str, parts: int = JSON_CHUNKS) -> list[str]:
    """Cut serialized JSON into `parts` roughly equal pieces, led by an empty one like the API."""
    size = max(1, -(-len(serialized) // parts))
    return [""] + [serialized[i : i + size] for i in range(0, len(serialized), size)]


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def output_tokens(reply: Reply) -> int:
    """A deterministic token count: words of text plus characters of tool input / 4."""
    count = 0
    for block in reply.blocks:
        if isinstance(block, TextBlock):
            count += len(block.text.split())
        else:
            count += len(json.dumps(block.input)) // 4
    return max(1, count)


def content_json(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}


def message(reply: Reply, message_id: str, model: str, input_tokens: int) -> dict[str, Any]:
    """The complete message of a non-streaming (`stream: false`) request."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [content_json(block) for block in reply.blocks],
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": usage(input_tokens, output_tokens(reply)),
    }


def _block_events(index: int, block: Block) -> Iterator[dict[str, Any]]:
    if isinstance(block, TextBlock):
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in split_text(block.text)]
    else:
        assert isinstance(block, ToolUseBlock)
        start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        serialized = json.dumps(dict(block.input), separators=(",", ":"), ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in split_json(serialized)]
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def stream_events(
    reply: Reply, message_id: str, model: str, input_tokens: int
) -> list[dict[str, Any]]:
    """Every SSE event of a streaming answer, in order.

    With `reply.error_after_deltas`, the stream ends with an `error` event right after that
    many content deltas, the way an overloaded API breaks off a stream.
    """
    head = message(reply, message_id, model, input_tokens)
    head.update(content=[], stop_reason=None, usage=usage(input_tokens, 1))
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}, {"type": "ping"}]
    for index, block in enumerate(reply.blocks):
        events.extend(_block_events(index, block))
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens(reply)},
        }
    )
    events.append({"type": "message_stop"})
    if reply.error_after_deltas is None:
        return events
    error = error_body(529, reply.error_message or "Overloaded")
    return [*_cut_after_deltas(events, reply.error_after_deltas), error]


def _cut_after_deltas(events: list[dict[str, Any]], deltas: int) -> list[dict[str, Any]]:
    seen = 0
    for position, event in enumerate(events):
        # message_start and ping always go out: the error comes once the stream has begun.
        if seen == deltas and position >= 2:
            return events[:position]
        if event["type"] == "content_block_delta":
            seen += 1
    return events


def error_body(status: int, message_text: str, request_id: str | None = None) -> dict[str, Any]:
    """The JSON body of an API error (also the payload of an SSE `error` event)."""
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message_text},
    }
    if request_id is not None:
        body["request_id"] = request_id
    return body
