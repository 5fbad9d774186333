"""Whole transcripts recorded from the real CLI 2.1.330 (tests/contracts/claude_code_2.1.330),
translated line by line: the event stream must tell the same story as the transcript.

* one ToolCallStart per tool_use id, with the input the assistant line had;
* one ToolCallResult per tool_result, after its ToolCallStart;
* exactly one TurnComplete per result line, right after its UsageReport;
* the text events of every API message add up to the text of its assistant lines;
* every denial of a result line is in its TurnComplete, with the tool's name, id and input.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from betcode.protocol.messages import (
    AssistantMessage,
    Message,
    Result,
    StreamEvent,
    SystemInit,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from betcode.protocol.reader import ProtocolReader
from betcode.sessions.translate import AgentEvent, Translator, kind_of

FIXTURES = Path(__file__).resolve().parents[2] / "contracts" / "claude_code_2.1.330"
TRANSCRIPTS = sorted(FIXTURES.glob("*.ndjson"))


class TranscriptStory:
    """What the transcript says happened, and what the events say, side by side."""

    def __init__(self) -> None:
        self.assistant_inputs: dict[str, dict[str, Any]] = {}
        self.announced_inputs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.tool_results: Counter[str] = Counter()
        self.reported_results: Counter[str] = Counter()
        self.assistant_text: dict[str, list[str]] = defaultdict(list)
        self.event_text: dict[str, list[str]] = defaultdict(list)
        self.result_lines = 0
        self.result_denials: list[tuple[str, str, dict[str, Any]]] = []
        self.event_denials: list[tuple[str, str, dict[str, Any]]] = []
        self.inits = 0
        self.session_infos = 0
        self._streaming: dict[str, str] = {}  # parent_tool_use_id → message id being streamed

    def read(self, message: Message, events: list[AgentEvent]) -> None:
        source_message_id = self._note_line(message)
        kinds = [kind_of(event) for event in events]
        if isinstance(message, Result):
            self.result_lines += 1
            self.result_denials += [
                (denial.tool_name, denial.tool_use_id, denial.tool_input)
                for denial in message.permission_denials
            ]
            assert kinds.count("turn_complete") == 1, kinds
            assert kinds[kinds.index("turn_complete") - 1] == "usage", kinds
        else:
            assert "turn_complete" not in kinds, (message, kinds)
        for event, kind in zip(events, kinds, strict=True):
            self._note_event(event, kind, source_message_id)

    def _note_line(self, message: Message) -> str | None:
        if isinstance(message, StreamEvent):
            parent = message.parent_tool_use_id or ""
            if message.event.type == "message_start" and message.message_id:
                self._streaming[parent] = message.message_id
            return message.api_message_id or self._streaming.get(parent)
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    self.assistant_inputs.setdefault(block.id, block.input)
                elif isinstance(block, TextBlock):
                    self.assistant_text[message.message_id].append(block.text)
            return message.message_id
        if isinstance(message, UserMessage):
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    self.tool_results[block.tool_use_id] += 1
        elif isinstance(message, SystemInit):
            self.inits += 1
        return None

    def _note_event(self, event: AgentEvent, kind: str, source_message_id: str | None) -> None:
        if kind == "tool_call_start":
            body = event.tool_call_start
            self.announced_inputs[body.tool_id].append(MessageToDict(body.input))
        elif kind == "tool_call_result":
            tool_id = event.tool_call_result.tool_id
            assert tool_id in self.announced_inputs, f"result before start for {tool_id}"
            self.reported_results[tool_id] += 1
        elif kind == "turn_complete":
            self.event_denials += [
                (denial.tool_name, denial.tool_use_id, MessageToDict(denial.tool_input))
                for denial in event.turn_complete.permission_denials
            ]
        elif kind == "text_delta" and source_message_id is not None:
            self.event_text[source_message_id].append(event.text_delta.text)
        elif kind == "session_info":
            self.session_infos += 1


def tell(lines: list[bytes]) -> TranscriptStory:
    reader = ProtocolReader()
    translator = Translator("contract-session")
    story = TranscriptStory()
    for line in lines:
        message = reader.decode(line)
        if message is not None:
            story.read(message, translator.translate(message))
    return story


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
def test_a_recorded_transcript_translates_into_the_same_story(path: Path) -> None:
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    assert all(isinstance(json.loads(line), dict) for line in lines)
    story = tell(lines)

    assert dict(story.announced_inputs) == {
        tool_id: [tool_input] for tool_id, tool_input in story.assistant_inputs.items()
    }
    assert story.reported_results == story.tool_results
    assert (story.session_infos > 0) == (story.inits > 0)
    assert story.event_denials == story.result_denials
    for message_id, texts in story.assistant_text.items():
        assert "".join(story.event_text[message_id]) == "".join(texts), message_id


@pytest.mark.parametrize("name", ["bash_deny", "bash_deny_interrupt", "interrupt_permission"])
def test_a_denied_tool_call_is_named_in_the_turn_complete(name: str) -> None:
    lines = [line for line in (FIXTURES / f"{name}.ndjson").read_bytes().splitlines() if line]
    story = tell(lines)

    [(tool_name, tool_use_id, tool_input)] = story.event_denials
    assert tool_name == "Bash"
    assert tool_input == story.assistant_inputs[tool_use_id]  # the call the assistant made


def test_a_turn_without_denials_has_none_in_its_turn_complete() -> None:
    lines = (FIXTURES / "bash_allow.ndjson").read_bytes().splitlines()
    story = tell([line for line in lines if line])
    assert story.result_lines == 1
    assert story.event_denials == []
