"""The second JSON-lines dialect (a Dart SDK for the same CLI,
docs/PROTOCOL.md#the-dart-sdk-dialect), read as stream-json.

Shapes that differ from Claude Code's own stream-json, and what they are read as:

* `callback.request` (same body as a control_request) → `control_request`
* `session.created` with `session_id` → `system` subtype `session_created`
* `error` with `error: {code, message}` → `system` subtype `error`
* `control_response` with a top-level `request_id` and the payload as `response` →
  `control_response` wrapping `{subtype: "success", request_id, response}`
* `result` with `turn_count` and `duration_seconds` → `num_turns` and `duration_ms`
* `assistant` with `model` and `usage` beside `message` → inside `message`

Replies go back as `callback.response` with snake_case fields (writer.py).
"""

from __future__ import annotations

from typing import Any

from betcode.protocol.messages import Dialect


def to_stream_json(raw: dict[str, Any]) -> tuple[dict[str, Any], Dialect]:
    """Return `raw` in the stream-json shape, and the dialect it was written in."""
    kind = raw.get("type")
    if kind == "callback.request":
        return {**raw, "type": "control_request"}, Dialect.DART_SDK
    if kind == "session.created":
        return {**raw, "type": "system", "subtype": "session_created"}, Dialect.DART_SDK
    if kind == "error":
        return {**raw, "type": "system", "subtype": "error"}, Dialect.DART_SDK
    if kind == "control_response" and _is_dart_control_response(raw):
        answer = {"subtype": "success", "request_id": raw["request_id"]}
        answer["response"] = raw.get("response")
        return {"type": "control_response", "response": answer}, Dialect.DART_SDK
    if kind == "result" and _is_dart_result(raw):
        return _dart_result(raw), Dialect.DART_SDK
    if kind == "assistant" and _has_envelope_model_fields(raw):
        return _dart_assistant(raw), Dialect.DART_SDK
    return raw, Dialect.STREAM_JSON


def _is_dart_control_response(raw: dict[str, Any]) -> bool:
    response = raw.get("response")
    nested_id = isinstance(response, dict) and "request_id" in response
    return "request_id" in raw and not nested_id


def _is_dart_result(raw: dict[str, Any]) -> bool:
    return "num_turns" not in raw and ("turn_count" in raw or "duration_seconds" in raw)


def _dart_result(raw: dict[str, Any]) -> dict[str, Any]:
    converted = {**raw}
    if "turn_count" in raw:
        converted["num_turns"] = raw["turn_count"]
    seconds = raw.get("duration_seconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        converted["duration_ms"] = round(seconds * 1000)
    return converted


def _has_envelope_model_fields(raw: dict[str, Any]) -> bool:
    message = raw.get("message")
    if not isinstance(message, dict):
        return False
    return ("model" in raw and "model" not in message) or (
        "usage" in raw and "usage" not in message
    )


def _dart_assistant(raw: dict[str, Any]) -> dict[str, Any]:
    message = {**raw["message"]}
    for key in ("model", "usage"):
        if key in raw and key not in message:
            message[key] = raw[key]
    return {**raw, "message": message}
