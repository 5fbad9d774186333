"""LineFramer: bytes → lines, with the payload limit enforced while reading."""

from __future__ import annotations

import asyncio
import json
import logging

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from betcode.protocol.framing import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MIB,
    Line,
    LineFramer,
    PayloadLimitError,
    iter_line_batches,
    validate_max_payload_bytes,
)
from betcode.protocol.truncation import truncation_marker


def frame_all(framer: LineFramer, chunks: list[bytes]) -> list[Line]:
    lines: list[Line] = []
    for chunk in chunks:
        lines.extend(framer.feed(chunk))
    lines.extend(framer.finish())
    return lines


def datas(lines: list[Line]) -> list[bytes]:
    return [line.data for line in lines]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b'{"a":1}\n'], [b'{"a":1}'], id="one line"),
        pytest.param(
            [b'{"a":1}\n{"b":2}\n{"c":3}\n'],
            [b'{"a":1}', b'{"b":2}', b'{"c":3}'],
            id="several per chunk",
        ),
        pytest.param([b'{"a"', b":1", b"}\n"], [b'{"a":1}'], id="partial chunks"),
        pytest.param(
            [b'{"a":1}\n{"b"', b":2}"], [b'{"a":1}', b'{"b":2}'], id="final line without newline"
        ),
        pytest.param([b'{"a":1}\r\n{"b":2}\r\n'], [b'{"a":1}', b'{"b":2}'], id="CRLF"),
        pytest.param([b'{"a":1}\r', b"\n"], [b'{"a":1}'], id="CR and LF in different chunks"),
        pytest.param(
            [b"\n\n  \n\t\r\n{}\n\n"], [b"{}"], id="blank and whitespace-only lines skipped"
        ),
        pytest.param([b"", b"\n", b""], [], id="empty chunks"),
        pytest.param([b"not json\n"], [b"not json"], id="non-JSON lines are framed too"),
        pytest.param([b'{"a":"x\\ny"}\n'], [b'{"a":"x\\ny"}'], id="escaped newline stays inside"),
        pytest.param([b"a\rb\n"], [b"a\rb"], id="a CR inside a line is kept"),
    ],
)
def test_framing_cases(chunks: list[bytes], expected: list[bytes]) -> None:
    lines = frame_all(LineFramer(), chunks)
    assert datas(lines) == expected
    assert all(not line.truncated and line.original_size == len(line.data) for line in lines)


def test_finish_resets_the_framer() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}') == []
    assert framer.finish() == [Line(b'{"a":1}', 7, False)]
    assert framer.finish() == []
    assert framer.feed(b'{"b":2}\n') == [Line(b'{"b":2}', 7, False)]


@pytest.mark.parametrize("limit", [0, MIB - 1, 100 * MIB + 1, -5])
def test_payload_limit_outside_1_to_100_mib_is_refused(limit: int) -> None:
    with pytest.raises(PayloadLimitError, match="1–100 MiB"):
        LineFramer(limit)


def test_payload_limit_bounds_are_allowed() -> None:
    assert validate_max_payload_bytes(MIB) == MIB
    assert validate_max_payload_bytes(100 * MIB) == 100 * MIB
    assert LineFramer().max_line_bytes == DEFAULT_MAX_PAYLOAD_BYTES == 10 * MIB
    with pytest.raises(PayloadLimitError, match="integer"):
        validate_max_payload_bytes(True)


def _tool_result_line(content: str) -> bytes:
    message = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"tool_use_id": "toolu_001", "type": "tool_result", "content": content}],
        },
        "session_id": "s",
    }
    return json.dumps(message, ensure_ascii=False).encode()


@pytest.mark.parametrize("chunk_size", [MIB // 3, 7 * MIB])
def test_oversized_line_is_cut_to_valid_json_with_marker(
    chunk_size: int, caplog: pytest.LogCaptureFixture
) -> None:
    big = _tool_result_line('é\\"x' * 900_000)
    stream = b'{"before":1}\n' + big + b'\r\n{"after":2}\n'
    framer = LineFramer(MIB)
    with caplog.at_level(logging.WARNING, logger="betcode.protocol.framing"):
        lines = frame_all(
            framer, [stream[i : i + chunk_size] for i in range(0, len(stream), chunk_size)]
        )
    assert datas(lines)[0] == b'{"before":1}'
    assert datas(lines)[2] == b'{"after":2}'
    cut = lines[1]
    assert cut.truncated
    assert cut.original_size == len(big)
    assert len(cut.data) <= MIB
    parsed = msgspec.json.decode(cut.data)
    content = parsed["message"]["content"][0]["content"]
    assert content.endswith(truncation_marker(len(big)).decode())
    assert content.startswith('é\\"x')
    assert f"{len(big)} bytes exceeds the payload limit of {MIB} bytes" in caplog.text


def test_line_exactly_at_the_limit_is_not_truncated() -> None:
    line = b'{"a":"' + b"x" * (MIB - 8) + b'"}'
    assert len(line) == MIB
    for ending in (b"\n", b"\r\n"):
        framer = LineFramer(MIB)
        lines = frame_all(framer, [line[:1000], line[1000:] + ending[:1], ending[1:]])
        assert lines == [Line(line, MIB, False)]


def test_memory_stays_bounded_by_the_limit_for_an_endless_line() -> None:
    framer = LineFramer(MIB)
    piece = b'{"content":"' + b"y" * (256 * 1024)
    assert framer.feed(piece) == []
    for _ in range(200):  # 50 MiB more without a newline
        assert framer.feed(b"z" * (256 * 1024)) == []
        assert framer.buffered_bytes <= MIB
    [line] = framer.feed(b'"}\n')
    assert line.truncated
    assert line.original_size == len(piece) + 200 * 256 * 1024 + 2
    assert msgspec.json.decode(line.data)["content"].endswith("]")


# Property tests -------------------------------------------------------------------------------

_line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))


def reference_lines(stream: bytes) -> list[bytes]:
    """What framing must give, computed the obvious way on the whole stream."""
    found = []
    for raw in stream.split(b"\n"):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if line.strip(b" \t\r\n\x0b\x0c"):
            found.append(line)
    return found


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line_bytes, max_size=12),
    crlf=st.booleans(),
    trailing_newline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
)
def test_any_split_of_a_byte_stream_gives_the_same_lines(
    lines: list[bytes], crlf: bool, trailing_newline: bool, cuts: list[int]
) -> None:
    ending = b"\r\n" if crlf else b"\n"
    stream = ending.join(lines) + (ending if trailing_newline else b"")
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert datas(frame_all(LineFramer(), chunks)) == reference_lines(stream)


@settings(max_examples=20, deadline=None)
@given(
    sizes=st.lists(
        st.integers(0, 1000) | st.integers(MIB - 8, MIB - 4) | st.integers(MIB, 3 * MIB),
        min_size=1,
        max_size=4,
    ),
    chunk_sizes=st.lists(st.integers(min_value=1, max_value=2 * MIB), min_size=1, max_size=8),
)
def test_memory_stays_bounded_whatever_the_line_and_chunk_sizes(
    sizes: list[int], chunk_sizes: list[int]
) -> None:
    lines = [b'{"s":"' + b"x" * size + b'"}' for size in sizes]
    stream = b"\n".join(lines) + b"\n"
    framer = LineFramer(MIB)
    framed: list[Line] = []
    position = 0
    for number in range(len(stream)):
        if position >= len(stream):
            break
        size = chunk_sizes[number % len(chunk_sizes)]
        framed.extend(framer.feed(stream[position : position + size]))
        position += size
        assert framer.buffered_bytes <= MIB
    framed.extend(framer.finish())
    assert [line.original_size for line in framed] == [len(line) for line in lines]
    assert [line.truncated for line in framed] == [len(line) > MIB for line in lines]
    assert all(len(line.data) <= MIB for line in framed)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=25, deadline=None)
@given(
    value=_json_values,
    filler=st.text(min_size=1, max_size=4),
    repeat=st.integers(min_value=300_000, max_value=420_000),
    chunk=st.integers(min_value=100_000, max_value=3 * MIB),
)
def test_truncated_line_always_parses_and_carries_the_marker(
    value: object, filler: str, repeat: int, chunk: int
) -> None:
    document = {"before": value, "big": filler * repeat, "after": value}
    line = json.dumps(document, ensure_ascii=bool(repeat % 2)).encode()
    if len(line) <= MIB:
        line = json.dumps({**document, "pad": "p" * MIB}).encode()
    framer = LineFramer(MIB)
    lines = frame_all(framer, [line[i : i + chunk] for i in range(0, len(line), chunk)] + [b"\n"])
    [cut] = lines
    assert cut.truncated
    assert cut.original_size == len(line)
    assert len(cut.data) <= MIB
    assert truncation_marker(len(line)) in cut.data
    msgspec.json.decode(cut.data)


async def test_iter_line_batches_reads_a_stream_in_batches() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b'{"a":1}\n{"b"')
    reader.feed_data(b':2}\n\n{"c":3}')
    reader.feed_eof()
    batches = [
        datas(batch) async for batch in iter_line_batches(reader, LineFramer(), chunk_size=8)
    ]
    assert [line for batch in batches for line in batch] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert batches[-1] == [b'{"c":3}']
    assert all(batches)
