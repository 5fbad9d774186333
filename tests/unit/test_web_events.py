"""Events as the page reads them: protobuf's JSON mapping, made once per event."""

from __future__ import annotations

import json

from betcode.v1 import agent_pb2
from betcode.web.events import EventJson


def event(sequence: int, text: str) -> bytes:
    return agent_pb2.AgentEvent(
        sequence=sequence, text_delta=agent_pb2.TextDelta(text=text)
    ).SerializeToString()


def test_a_batch_is_a_json_array_with_proto_field_names() -> None:
    batch = EventJson().batch([event(7, "hé"), event(8, "")])
    assert json.loads(batch) == [
        {"sequence": "7", "text_delta": {"text": "hé"}},
        {"sequence": "8", "text_delta": {}},
    ]
    assert EventJson().batch([]) == "[]"  # the live edge


def test_the_same_bytes_are_converted_once_and_the_cache_is_bounded() -> None:
    cache = EventJson(capacity=2)
    first = event(1, "a")
    text = cache.text(first)
    assert cache.text(first) is text
    cache.text(event(2, "b"))
    cache.text(event(3, "c"))
    assert cache.text(first) is not text  # evicted, made again
    assert cache.text(first) == text
