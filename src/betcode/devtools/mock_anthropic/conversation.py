"""Reading a Messages API request body: which scenario it asks for and how far the turn is.

A turn starts at the latest *prompt*: a user message with text and no tool_result. The
`SCN:<name>` token (optionally followed by a JSON object of arguments) is looked up in that
prompt's text; the last token wins. Every assistant message after the prompt is one answered
step, so a request carrying tool results asks for the scenario's next step.

An interrupt ends a turn with a note ("[Request interrupted by user…]") that the CLI merges
into one user message with what comes next: the interrupted call's tool_result before it, the
next prompt after it. Such a message is a prompt too, and only its text after the note counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOKEN = re.compile(r"SCN:([A-Za-z0-9_.-]+)")
# The CLI tells the model its cwd in an environment note (a role:"system" message in 2.1.330).
CWD_LINE = re.compile(r"Primary working directory: (\S+)")
INTERRUPT_NOTE = "[Request interrupted by user"


class ScenarioArgsError(ValueError):
    """The JSON after a `SCN:<name>` token is not a JSON object."""


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    is_error: bool
    text: str


@dataclass(frozen=True)
class Conversation:
    """What the mock needs to know about one request."""

    scenario: str | None
    args: Mapping[str, Any]
    step: int
    tool_results: tuple[ToolResult, ...]
    tools: tuple[Mapping[str, Any], ...]
    stream: bool
    cwd: str | None  # the CLI's working directory, when the request says it


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (anything else in it, or a non-list, is ignored)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return _mappings(content)


def _prompt_text(message: Mapping[str, Any]) -> str | None:
    """The text of a prompt (after the last interrupt note in it); None for other messages."""
    if message.get("role") != "user":
        return None
    blocks = _blocks(message)
    notes = [
        i
        for i, b in enumerate(blocks)
        if b.get("type") == "text" and str(b.get("text", "")).startswith(INTERRUPT_NOTE)
    ]
    if not notes and any(b.get("type") == "tool_result" for b in blocks):
        return None  # tool results: the turn goes on
    typed = [b for b in blocks[notes[-1] + 1 if notes else 0 :] if b.get("type") == "text"]
    return "\n".join(str(b.get("text", "")) for b in typed) if typed else None


def block_text(content: Any) -> str:
    """The text of a tool_result's content (a string or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) for b in content if isinstance(b, Mapping) and "text" in b
        )
    return ""


def parse_token(text: str) -> tuple[str | None, dict[str, Any]]:
    """The last `SCN:<name>` in `text` and the JSON object right after it, if any."""
    matches = list(TOKEN.finditer(text))
    if not matches:
        return None, {}
    last = matches[-1]
    rest = text[last.end() :].lstrip(" ")
    if not rest.startswith("{"):
        return last.group(1), {}
    try:
        args, _ = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError as error:
        raise ScenarioArgsError(f"arguments of SCN:{last.group(1)} are not JSON: {error}") from None
    if not isinstance(args, dict):
        raise ScenarioArgsError(f"arguments of SCN:{last.group(1)} must be a JSON object")
    return last.group(1), args


def _latest_tool_results(messages: Sequence[Mapping[str, Any]]) -> tuple[ToolResult, ...]:
    """The tool results of the last user message that has any (notes may follow it)."""
    for message in reversed(messages):
        results = tuple(
            ToolResult(
                tool_use_id=str(block.get("tool_use_id", "")),
                is_error=bool(block.get("is_error", False)),
                text=block_text(block.get("content")),
            )
            for block in _blocks(message)
            if message.get("role") == "user" and block.get("type") == "tool_result"
        )
        if results:
            return results
    return ()


def read_conversation(body: Mapping[str, Any]) -> Conversation:
    """Parse a /v1/messages body; raises ScenarioArgsError for malformed token arguments."""
    messages = _mappings(body.get("messages"))
    prompt_index, text = -1, ""
    for index in range(len(messages) - 1, -1, -1):
        found = _prompt_text(messages[index])
        if found is not None:
            prompt_index, text = index, found
            break
    scenario, args = parse_token(text)
    return Conversation(
        scenario=scenario,
        args=args,
        step=sum(1 for m in messages[prompt_index + 1 :] if m.get("role") == "assistant"),
        tool_results=_latest_tool_results(messages[prompt_index + 1 :]),
        tools=tuple(_mappings(body.get("tools"))),
        stream=bool(body.get("stream", False)),
        cwd=_cwd(messages),
    )


def _cwd(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in messages:
        for block in _blocks(message):
            found = CWD_LINE.search(str(block.get("text", "")))
            if found:
                return found.group(1)
    return None
