"""The mock Messages API over real loopback HTTP: wire shapes, scenarios, errors, stalls."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.devtools.mock_anthropic import (
    MockAnthropic,
    Reply,
    Scenario,
    TextBlock,
    ToolUseBlock,
    question_text,
)
from betcode.devtools.mock_anthropic.scenarios import tool_step
from betcode.devtools.mock_anthropic.sse import split_json, split_text

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "header": {"type": "string", "maxLength": 12},
                    "options": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 4,
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string"},
                                "description": {"type": "string"},
                                "preview": {"type": "string"},
                            },
                            "required": ["label", "description"],
                        },
                    },
                    "multiSelect": {"type": "boolean", "default": False},
                    "tag": {"type": "string", "minLength": 3},
                },
                "required": ["question", "header", "options", "multiSelect", "tag"],
            },
        },
        "answers": {"type": "object"},
    },
    "required": ["questions"],
}


@pytest.fixture
def mock() -> Iterator[MockAnthropic]:
    with MockAnthropic() as server:
        yield server


def body(*messages: dict[str, Any], stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "messages": list(messages),
        **extra,
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def post(
    mock: MockAnthropic, payload: Any, path: str = "/v1/messages?beta=true"
) -> http.client.HTTPResponse:
    host, port = mock.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
    return connection.getresponse()


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """Parse an SSE body: each frame's `event:` name must match its data's type."""
    events = []
    for frame in raw.decode().split("\n\n"):
        if not frame:
            continue
        name_line, data_line = frame.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {event['type']}"
        events.append(event)
    return events


def read_events(response: http.client.HTTPResponse) -> list[dict[str, Any]]:
    return parse_sse(response.read())


def deltas(events: list[dict[str, Any]], kind: str, field: str) -> list[str]:
    return [
        e["delta"][field]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == kind
    ]


def test_plain_text_streams_like_the_api(mock: MockAnthropic) -> None:
    response = post(mock, body(user("hi SCN:plain")))
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    assert response.getheader("request-id", "").startswith("req_mock_")
    events = read_events(response)
    assert [e["type"] for e in events[:3]] == ["message_start", "ping", "content_block_start"]
    assert [e["type"] for e in events[-3:]] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    text = deltas(events, "text_delta", "text")
    assert len(text) > 1
    assert "".join(text) == "Hello from the mock model."
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    assert events[-2]["usage"]["output_tokens"] > 0
    assert events[0]["message"]["model"] == "claude-test"
    [recorded] = mock.message_requests
    assert recorded.body["messages"][0]["content"][0]["text"] == "hi SCN:plain"


def test_tool_input_arrives_as_several_json_chunks(mock: MockAnthropic) -> None:
    events = read_events(post(mock, body(user('SCN:tool_bash {"command": "ls -la /"}'))))
    start = next(e for e in events if e["type"] == "content_block_start")
    assert start["content_block"]["name"] == "Bash"
    assert start["content_block"]["id"].startswith("toolu_mock_")
    chunks = deltas(events, "input_json_delta", "partial_json")
    assert len([c for c in chunks if c]) >= 3
    assert json.loads("".join(chunks)) == {"command": "ls -la /", "description": "Say hello"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


def test_non_streaming_request_gets_a_whole_message(mock: MockAnthropic) -> None:
    response = post(mock, body(user("SCN:two_tools"), stream=False))
    message = json.loads(response.read())
    assert message["type"] == "message"
    assert [b["type"] for b in message["content"]] == ["text", "tool_use", "tool_use"]
    assert message["stop_reason"] == "tool_use"
    ids = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
    assert len(ids) == 2


def test_turn_continues_after_tool_results_and_quotes_them(mock: MockAnthropic) -> None:
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "out-123",
        "is_error": True,
    }
    payload = body(
        user("SCN:tool_bash"),
        {"role": "assistant", "content": [tool_use]},
        {"role": "user", "content": [result]},
        {"role": "system", "content": [{"type": "text", "text": "a note after the result"}]},
        stream=False,
    )
    message = json.loads(post(mock, payload).read())
    assert message["content"][0]["text"].endswith("- error: out-123")


def test_latest_prompt_picks_the_scenario(mock: MockAnthropic) -> None:
    history = [user("SCN:tool_bash"), {"role": "assistant", "content": "done"}]
    message = json.loads(post(mock, body(*history, user("no token"), stream=False)).read())
    assert message["content"] == [{"type": "text", "text": "Hello from the mock model."}]


def test_prompt_after_an_interrupted_tool_call_starts_a_new_turn(mock: MockAnthropic) -> None:
    # The CLI 2.1.330 merges the refused call's result, its interrupt note and the next prompt
    # into one user message.
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    refused = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "no", "is_error": True}
    note = {"type": "text", "text": "[Request interrupted by user for tool use]\n"}
    merged = [refused, note, {"type": "text", "text": "SCN:tool_read"}]
    payload = body(
        user("SCN:tool_bash"),
        {"role": "assistant", "content": [tool_use]},
        {"role": "user", "content": merged},
        stream=False,
    )
    message = json.loads(post(mock, payload).read())
    assert message["content"][0]["name"] == "Read"


def test_prompt_after_an_interrupted_text_turn_ignores_the_old_token(mock: MockAnthropic) -> None:
    note = {"type": "text", "text": "[Request interrupted by user]\n"}
    merged = [{"type": "text", "text": "SCN:tool_bash"}, note, {"type": "text", "text": "hi"}]
    message = json.loads(post(mock, body({"role": "user", "content": merged}, stream=False)).read())
    assert message["content"] == [{"type": "text", "text": "Hello from the mock model."}]


def test_relative_file_path_is_resolved_against_the_cli_cwd(mock: MockAnthropic) -> None:
    env_note = {"role": "system", "content": "Primary working directory: /work/repo\n"}
    message = json.loads(post(mock, body(user("SCN:tool_write"), env_note, stream=False)).read())
    assert message["content"][0]["input"]["file_path"] == "/work/repo/notes.txt"


@pytest.mark.parametrize("count", [1, 3])
def test_ask_user_question_input_follows_the_schema_sent(mock: MockAnthropic, count: int) -> None:
    tools = [{"name": "AskUserQuestion", "input_schema": ASK_SCHEMA}]
    prompt = user(f'SCN:ask {{"questions": {count}}}')
    message = json.loads(post(mock, body(prompt, stream=False, tools=tools)).read())
    questions = message["content"][0]["input"]["questions"]
    assert [q["question"] for q in questions] == [question_text(n + 1) for n in range(count)]
    for question in questions:
        assert len(question["options"]) == 2
        assert question["multiSelect"] is False
        assert question["tag"] == "xxx"  # a required field the mock has no value for
        assert "preview" not in question["options"][0]


def test_scenario_problems_come_back_as_readable_text(mock: MockAnthropic) -> None:
    for prompt, expected in [
        ("SCN:ask", "offers no AskUserQuestion tool"),
        ("SCN:nope", "unknown scenario 'nope'; known:"),
        ('SCN:plain {"text": 5}', "argument 'text' must be"),
        ("SCN:plain {oops", "are not JSON"),
    ]:
        message = json.loads(post(mock, body(user(prompt), stream=False)).read())
        assert expected in message["content"][0]["text"]


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(429, "rate_limit_error"), (500, "api_error"), (529, "overloaded_error")],
)
def test_http_errors_then_recovery(mock: MockAnthropic, status: int, error_type: str) -> None:
    payload = body(user(f'SCN:http_{status} {{"times": 2}}'))
    for _ in range(2):
        response = post(mock, payload)
        assert response.status == status
        assert json.loads(response.read())["error"]["type"] == error_type
    events = read_events(post(mock, payload))
    assert "".join(deltas(events, "text_delta", "text")) == "Recovered after errors."


def test_midstream_error_breaks_the_stream_then_retry_succeeds(mock: MockAnthropic) -> None:
    payload = body(user('SCN:midstream_error {"after_deltas": 2}'))
    events = read_events(post(mock, payload))
    assert len(deltas(events, "text_delta", "text")) == 2
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "overloaded_error"
    retry = json.loads(post(mock, dict(payload, stream=False)).read())
    assert retry["content"][0]["text"] == "Recovered after a stream error."


def test_stall_before_first_byte_ends_on_release(mock: MockAnthropic) -> None:
    answered = threading.Event()

    def client() -> None:
        post(mock, body(user('SCN:stall_first_byte {"seconds": 600}'))).read()
        answered.set()

    thread = threading.Thread(target=client)
    thread.start()
    mock.wait_for_message_requests(1)
    assert not answered.is_set()
    mock.release_stalls()
    thread.join(10)
    assert answered.is_set()


def test_stall_mid_stream_holds_back_the_rest(mock: MockAnthropic) -> None:
    response = post(mock, body(user('SCN:stall_mid_stream {"seconds": 600, "after_deltas": 1}')))
    head = b""
    while head.count(b"content_block_delta") < 2:  # the event name and its data's type
        head += response.read1()
    mock.release_stalls()
    events = parse_sse(head + response.read())
    assert "".join(deltas(events, "text_delta", "text")) == "The stalled stream finished after all."


def test_queued_replies_come_first(mock: MockAnthropic) -> None:
    mock.enqueue(Reply(http_status=500), Reply(blocks=(TextBlock("queued"),)))
    assert post(mock, body(user("SCN:plain"))).status == 500
    message = json.loads(post(mock, body(user("SCN:plain"), stream=False)).read())
    assert message["content"][0]["text"] == "queued"


def test_registered_scenario_runs_its_steps_in_turn(mock: MockAnthropic) -> None:
    mock.register(
        "read_then_bash",
        Scenario(
            "Read, then a fixed Bash call",
            (tool_step("Read", "file_path"), lambda ctx: Reply((ToolUseBlock("Bash", {}),))),
            {"file_path": "/etc/hostname"},
        ),
    )
    history: list[dict[str, Any]] = [user("SCN:read_then_bash")]
    names = []
    for step in range(3):
        message = json.loads(post(mock, body(*history, stream=False)).read())
        block = message["content"][0]
        names.append(block.get("name", block["type"]))
        result = {"type": "tool_result", "tool_use_id": block.get("id"), "content": f"r{step}"}
        history += [
            {"role": "assistant", "content": message["content"]},
            {"role": "user", "content": [result]},
        ]
    assert names == ["Read", "Bash", "text"]
    assert block["text"].endswith("- ok: r1")


def test_other_paths_get_harmless_answers(mock: MockAnthropic) -> None:
    count = post(mock, body(user("x")), path="/v1/messages/count_tokens")
    assert count.status == 200
    assert json.loads(count.read())["input_tokens"] > 0
    other = post(mock, {}, path="/api/unknown")
    assert other.status == 200
    assert json.loads(other.read()) == {}
    assert [r.path for r in mock.requests] == ["/v1/messages/count_tokens", "/api/unknown"]
    assert mock.message_requests == []


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_text_and_json_splits_rejoin(text: str) -> None:
    assert "".join(split_text(text)) == text
    assert "".join(split_json(text)) == text


def test_runs_as_a_process_that_prints_its_url() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "betcode.devtools.mock_anthropic", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        host, port = base_url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("POST", "/v1/messages", json.dumps(body(user("hi"), stream=False)))
        assert json.loads(connection.getresponse().read())["type"] == "message"
        process.terminate()
        assert process.wait(10) == 0
    finally:
        process.kill()
        process.wait()
