"""Layer-1 codec figures: framing + parsing of claude stdout on one core.

    .venv/bin/python benchmarks/bench_codec.py [--quick] [--json]

* text deltas: a stream of `stream_event` text_delta lines shaped like the real CLI's (~280 B),
  fed to LineFramer in 256 KiB chunks and decoded by ProtocolReader (target >= 500,000 lines/s);
* mixed: a partial-messages session (85 % deltas, 8 % assistant lines of ~1.9 KB, 7 % tool
  results of 2–5 KB, plus status/init/result per turn);
* framing only, for the text-delta stream;
* oversized: one 30 MB tool-result line under the default 10 MiB limit (framing + truncation).

Each figure is the best of a few runs. Figures are printed, never asserted; `--json` prints one
JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable

import msgspec

from betcode.protocol.framing import DEFAULT_READ_CHUNK_BYTES, LineFramer
from betcode.protocol.reader import ProtocolReader

SESSION = "cd2f9550-5d1c-4a3e-9b1f-0c8d2e7a4b11"
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "streams", "tokens")


def _uuid(random_source: random.Random) -> str:
    return "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031 - a fixed-width hex layout
        random_source.getrandbits(32),
        random_source.getrandbits(16),
        random_source.getrandbits(12),
        random_source.getrandbits(12),
        random_source.getrandbits(48),
    )


def text_delta(random_source: random.Random) -> bytes:
    text = " ".join(random_source.choices(WORDS, k=random_source.randint(1, 6)))
    return msgspec.json.encode(
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text + " "},
            },
            "session_id": SESSION,
            "parent_tool_use_id": None,
            "uuid": _uuid(random_source),
        }
    )


def assistant_line(random_source: random.Random) -> bytes:
    text = " ".join(random_source.choices(WORDS, k=250))
    return msgspec.json.encode(
        {
            "type": "assistant",
            "message": {
                "id": "msg_01ABCDEFG",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-5-5",
                "content": [{"type": "text", "text": text}],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1250, "output_tokens": 1},
            },
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "uuid": _uuid(random_source),
        }
    )


def tool_result_line(random_source: random.Random) -> bytes:
    output = "\n".join(
        f"{n:6}\t" + " ".join(random_source.choices(WORDS, k=8))
        for n in range(random_source.randint(40, 100))
    )
    return msgspec.json.encode(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "tool_use_id": "toolu_001",
                        "type": "tool_result",
                        "content": output,
                        "is_error": False,
                    }
                ],
            },
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "uuid": _uuid(random_source),
            "tool_use_result": {"stdout": output, "stderr": "", "interrupted": False},
        }
    )


TURN_LINES = [
    b'{"type":"system","subtype":"init","cwd":"/repo","session_id":"' + SESSION.encode() + b'",'
    b'"tools":["Task","Bash","Edit","Read","Write"],"mcp_servers":[],"model":"claude-opus-5-5",'
    b'"permissionMode":"default","uuid":"u"}',
    b'{"type":"system","subtype":"status","status":"requesting","session_id":"'
    + SESSION.encode()
    + b'"}',
    b'{"type":"result","subtype":"success","is_error":false,"num_turns":2,"duration_ms":147,'
    b'"total_cost_usd":0.00014,"usage":{"input_tokens":10,"output_tokens":5},"session_id":"'
    + SESSION.encode()
    + b'"}',
]


def text_delta_stream(count: int) -> bytes:
    random_source = random.Random(1)
    return b"\n".join(text_delta(random_source) for _ in range(count)) + b"\n"


def mixed_stream(count: int) -> bytes:
    random_source = random.Random(2)
    lines: list[bytes] = []
    while len(lines) < count:
        if len(lines) % 500 == 0:
            lines.extend(TURN_LINES)
        roll = random_source.random()
        if roll < 0.85:
            lines.append(text_delta(random_source))
        elif roll < 0.93:
            lines.append(assistant_line(random_source))
        else:
            lines.append(tool_result_line(random_source))
    return b"\n".join(lines) + b"\n"


def frame_and_decode(stream: bytes) -> int:
    framer = LineFramer()
    reader = ProtocolReader()
    decoded = 0
    view = memoryview(stream)
    for start in range(0, len(stream), DEFAULT_READ_CHUNK_BYTES):
        for line in framer.feed(bytes(view[start : start + DEFAULT_READ_CHUNK_BYTES])):
            if reader.decode_line(line) is not None:
                decoded += 1
    for line in framer.finish():
        if reader.decode_line(line) is not None:
            decoded += 1
    return decoded


def frame_only(stream: bytes) -> int:
    framer = LineFramer()
    framed = 0
    view = memoryview(stream)
    for start in range(0, len(stream), DEFAULT_READ_CHUNK_BYTES):
        framed += len(framer.feed(bytes(view[start : start + DEFAULT_READ_CHUNK_BYTES])))
    return framed + len(framer.finish())


def best_of(runs: int, work: Callable[[], int]) -> tuple[float, int]:
    """(fastest wall time in seconds, items) over `runs` runs."""
    best = float("inf")
    items = 0
    for _ in range(runs):
        started = time.perf_counter()
        items = work()
        best = min(best, time.perf_counter() - started)
    return best, items


def oversized_line_ms() -> float:
    content = "0123456789abcdef\\n" * (30 * 1024 * 1024 // 18)
    line = b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"'
    line += content.encode() + b'"}]},"session_id":"s"}\n'
    seconds, _ = best_of(3, lambda: frame_and_decode(line))
    return seconds * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller streams, fewer runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    count, runs = (50_000, 2) if args.quick else (300_000, 5)

    deltas = text_delta_stream(count)
    mixed = mixed_stream(count)
    delta_seconds, delta_lines = best_of(runs, lambda: frame_and_decode(deltas))
    mixed_seconds, mixed_lines = best_of(runs, lambda: frame_and_decode(mixed))
    framing_seconds, framed_lines = best_of(runs, lambda: frame_only(deltas))
    figures = {
        "python": platform.python_version(),
        "text_delta_lines_per_s": round(delta_lines / delta_seconds),
        "text_delta_mb_per_s": round(len(deltas) / delta_seconds / 1e6, 1),
        "text_delta_avg_line_bytes": round(len(deltas) / delta_lines),
        "mixed_lines_per_s": round(mixed_lines / mixed_seconds),
        "mixed_mb_per_s": round(len(mixed) / mixed_seconds / 1e6, 1),
        "mixed_avg_line_bytes": round(len(mixed) / mixed_lines),
        "framing_only_lines_per_s": round(framed_lines / framing_seconds),
        "oversized_30mb_line_ms": round(oversized_line_ms(), 1),
        "lines_per_run": count,
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"codec on one core (Python {figures['python']}, best of {runs}, {count:,} lines per run)"
    )
    print(
        f"  text deltas    {figures['text_delta_lines_per_s']:>10,} lines/s  "
        f"{figures['text_delta_mb_per_s']:>7} MB/s  "
        f"(~{figures['text_delta_avg_line_bytes']} B/line, target 500,000)"
    )
    print(
        f"  mixed stream   {figures['mixed_lines_per_s']:>10,} lines/s  "
        f"{figures['mixed_mb_per_s']:>7} MB/s  (~{figures['mixed_avg_line_bytes']} B/line)"
    )
    print(f"  framing only   {figures['framing_only_lines_per_s']:>10,} lines/s")
    print(f"  30 MB line cut to 10 MiB valid JSON: {figures['oversized_30mb_line_ms']} ms")


if __name__ == "__main__":
    main()
