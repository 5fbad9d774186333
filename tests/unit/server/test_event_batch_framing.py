"""encode_event_batch: already-serialized AgentEvents → AgentEventBatch bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from betcode.server.framing import encode_event_batch
from betcode.v1 import agent_pb2

# Text sizes on both sides of each varint length boundary (1, 2 and 3 length bytes).
TEXT_SIZES = st.sampled_from([0, 1, 100, 127, 128, 16_000, 16_383, 16_384, 70_000])


@st.composite
def events(draw: st.DrawFn) -> list[agent_pb2.AgentEvent]:
    sizes = draw(st.lists(TEXT_SIZES, max_size=12))
    return [
        agent_pb2.AgentEvent(
            sequence=seq, text_delta=agent_pb2.TextDelta(text="x" * size, is_complete=seq % 2 == 0)
        )
        for seq, size in enumerate(sizes, start=1)
    ]


@given(events())
def test_a_batch_parses_back_to_the_same_events(batch: list[agent_pb2.AgentEvent]) -> None:
    frames = [event.SerializeToString() for event in batch]

    encoded = encode_event_batch(frames)

    assert list(agent_pb2.AgentEventBatch.FromString(encoded).events) == batch
    assert encoded == agent_pb2.AgentEventBatch(events=batch).SerializeToString()


def test_an_empty_batch_is_empty_bytes() -> None:
    assert encode_event_batch([]) == b""
    assert len(agent_pb2.AgentEventBatch.FromString(b"").events) == 0
