"""Lines for claude's stdin: each function returns one complete line of JSON ending in b"\\n".

Claude Code kills itself (exit 1, no result) on a stdin line that is not JSON, on `null`, and on a
`user` message without role "user" (docs/PROTOCOL.md#input-claude-dies-on). These functions only
build JSON objects with msgspec (so a newline inside a value is always escaped, never a line break)
and refuse, with
`ProtocolWriteError`, values that cannot be JSON or that the CLI would reject or silently drop.

Replies to a control request go back in the dialect the request came in (`ControlRequest.dialect`):
stream-json `control_response` with camelCase fields, or the Dart SDK's `callback.response`
with snake_case fields (docs/PROTOCOL.md#the-dart-sdk-dialect).
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

import msgspec

from betcode.protocol.messages import Dialect

_encoder = msgspec.json.Encoder()
_REPLY_HEADS = (b'{"type":"control_response"', b'{"type":"callback.response"')


class _ReplyBody(msgspec.Struct):
    request_id: str


class _Reply(msgspec.Struct):
    response: _ReplyBody


_reply_decoder = msgspec.json.Decoder(_Reply)


class ProtocolWriteError(ValueError):
    """A stdin line was refused because the CLI would die on it or lose it."""


def user_message(content: str | list[dict[str, Any]], uuid: str | None = None) -> bytes:
    """A user turn. `content` is text or a list of content blocks (text, image, …).

    Every message carries a uuid: the CLI then reports its progress (`command_lifecycle`) and
    stamps the turn's init/result with it. When `uuid` is None a random one is generated; pass
    your own to correlate those messages with this one.
    """
    if isinstance(content, str):
        if not content.strip():
            raise ProtocolWriteError("a user message needs non-empty text")
    elif isinstance(content, list):
        if not content:
            raise ProtocolWriteError("a user message needs at least one content block")
        for block in content:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise ProtocolWriteError(
                    f"each content block must be an object with a 'type', got {block!r:.80}"
                )
    else:
        # The CLI drops such a message without a word (docs/PROTOCOL.md#slash-commands): refuse
        # rather than lose it.
        raise ProtocolWriteError(
            f"user message content must be text or a list of blocks, got {type(content).__name__}"
        )
    if uuid is None:
        uuid = str(uuid_module.uuid4())
    else:
        _check_uuid(uuid)
    return _line(
        {
            "type": "user",
            "message": {"role": "user", "content": content},
            "session_id": "",
            "parent_tool_use_id": None,
            "uuid": uuid,
        }
    )


def permission_allow(
    request_id: str,
    updated_input: Mapping[str, Any] | None = None,
    updated_permissions: list[dict[str, Any]] | None = None,
    dialect: Dialect = Dialect.STREAM_JSON,
    tool_use_id: str | None = None,
) -> bytes:
    """Allow a `can_use_tool`. `updated_input` REPLACES the tool input (the CLI validates it
    against the tool schema); `updated_permissions` are PermissionUpdate objects
    (docs/PROTOCOL.md#permission-requests)."""
    answer: dict[str, Any] = {"behavior": "allow"}
    if updated_input is not None:
        if not isinstance(updated_input, Mapping):
            raise ProtocolWriteError("updated_input must be an object (the full tool input)")
        answer[_name("updatedInput", dialect)] = dict(updated_input)
    if updated_permissions is not None:
        if not isinstance(updated_permissions, list) or not all(
            isinstance(update, dict) for update in updated_permissions
        ):
            raise ProtocolWriteError("updated_permissions must be a list of objects")
        answer[_name("updatedPermissions", dialect)] = updated_permissions
    if tool_use_id is not None:
        answer[_name("toolUseID", dialect)] = tool_use_id
    return control_success(request_id, answer, dialect)


def permission_deny(
    request_id: str,
    message: str,
    interrupt: bool = False,
    dialect: Dialect = Dialect.STREAM_JSON,
    tool_use_id: str | None = None,
) -> bytes:
    """Deny a `can_use_tool`. The model receives `message`; without one the CLI treats the
    answer as invalid (docs/PROTOCOL.md#permission-requests), so it is required. `interrupt` also
    ends the turn."""
    if not isinstance(message, str) or not message.strip():
        raise ProtocolWriteError("a deny needs a non-empty message for the model")
    answer: dict[str, Any] = {"behavior": "deny", "message": message}
    if interrupt:
        answer["interrupt"] = True
    if tool_use_id is not None:
        answer[_name("toolUseID", dialect)] = tool_use_id
    return control_success(request_id, answer, dialect)


def question_answers(
    request_id: str,
    original_input: Mapping[str, Any],
    answers: Mapping[str, str],
    dialect: Dialect = Dialect.STREAM_JSON,
) -> bytes:
    """Answer an AskUserQuestion: allow with the original input plus `answers`, keyed by each
    question's text (multi-select answers joined with ", "). Unanswered questions may be left
    out; an empty mapping tells the model the user did not answer (docs/PROTOCOL.md#questions)."""
    questions = original_input.get("questions") if isinstance(original_input, Mapping) else None
    if not isinstance(questions, list):
        # Without "questions" the CLI fails schema validation and the answers are lost.
        raise ProtocolWriteError(
            "original_input must be the AskUserQuestion input, with 'questions'"
        )
    if not isinstance(answers, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in answers.items()
    ):
        raise ProtocolWriteError("answers must map question text to answer text")
    return permission_allow(
        request_id, updated_input={**original_input, "answers": dict(answers)}, dialect=dialect
    )


def control_success(
    request_id: str,
    response: Mapping[str, Any] | None = None,
    dialect: Dialect = Dialect.STREAM_JSON,
) -> bytes:
    """A successful answer to a CLI control request (the permission answers are built on it)."""
    body: dict[str, Any] = {"subtype": "success", "request_id": _request_id(request_id)}
    if response is not None:
        body["response"] = dict(response)
    return _line({"type": _response_type(dialect), "response": body})


def control_error(request_id: str, error: str, dialect: Dialect = Dialect.STREAM_JSON) -> bytes:
    """A failed answer: the CLI reports "Tool permission request failed: Error: <error>"."""
    if not isinstance(error, str) or not error.strip():
        raise ProtocolWriteError("an error answer needs a non-empty error text")
    body = {"subtype": "error", "request_id": _request_id(request_id), "error": error}
    return _line({"type": _response_type(dialect), "response": body})


def control_request(subtype: str, request_id: str | None = None, **payload: Any) -> bytes:
    """A control request to the CLI (same shape in both dialects). The CLI echoes `request_id`
    in its control_response; when None a random one is generated, so pass your own to match
    the answer."""
    if not isinstance(subtype, str) or not subtype:
        raise ProtocolWriteError("a control request needs a subtype")
    if request_id is None:
        request_id = str(uuid_module.uuid4())
    request = {"subtype": subtype, **payload}
    return _line(
        {"type": "control_request", "request_id": _request_id(request_id), "request": request}
    )


def answered_request_id(line: bytes) -> str | None:
    """The request a reply line built here answers (a permission answer, control_success or
    control_error, in either dialect); None for any other line."""
    if not line.startswith(_REPLY_HEADS):
        return None
    try:
        return _reply_decoder.decode(line).response.request_id
    except msgspec.DecodeError:  # ValidationError included
        return None


def interrupt(request_id: str | None = None) -> bytes:
    """Stop the running turn; the answer lists uuids of queued messages (`still_queued`)."""
    return control_request("interrupt", request_id)


def initialize(request_id: str | None = None, hooks: Mapping[str, Any] | None = None) -> bytes:
    """Optional handshake; its answer lists commands, models, account, the CLI's pid
    (docs/PROTOCOL.md#messages-read)."""
    return control_request("initialize", request_id, hooks=None if hooks is None else dict(hooks))


_DART_SDK_NAMES = {
    "updatedInput": "updated_input",
    "updatedPermissions": "updated_permissions",
    "toolUseID": "tool_use_id",
}


def _name(stream_json_name: str, dialect: Dialect) -> str:
    return _DART_SDK_NAMES[stream_json_name] if dialect == Dialect.DART_SDK else stream_json_name


def _response_type(dialect: Dialect) -> str:
    return "callback.response" if dialect == Dialect.DART_SDK else "control_response"


def _request_id(request_id: str) -> str:
    if not isinstance(request_id, str) or not request_id:
        raise ProtocolWriteError("a request_id must be non-empty text")
    return request_id


def _check_uuid(value: str) -> None:
    # The CLI echoes the uuid in its own canonical form; anything else could not be matched.
    try:
        canonical = str(uuid_module.UUID(value))
    except (TypeError, ValueError, AttributeError):
        canonical = None
    if canonical is None or canonical != value.lower():
        example = uuid_module.uuid4()
        raise ProtocolWriteError(f"uuid must be a UUID such as {example}, got {value!r:.60}")


def _line(message: dict[str, Any]) -> bytes:
    try:
        return _encoder.encode(message) + b"\n"
    except (TypeError, ValueError, OverflowError, RecursionError) as error:
        raise ProtocolWriteError(
            f"cannot write this {message.get('type')} as JSON: {error}"
        ) from None
