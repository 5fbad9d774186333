"""Session ingest: claude's stdout lines recorded once, in order, published only after commit,
with few commits, and the permission bridge's own events ordered after the request's line."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from session_parts import RecordingGate

from betcode.claude.supervisor import SupervisorState
from betcode.devtools import fake_claude_messages as fake
from betcode.protocol.framing import Line
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import StoreWriter


def line(message: dict[str, Any]) -> Line:
    data = json.dumps({**message, "session_id": "c1", "uuid": "u"}).encode()
    return Line(data, len(data))


def a_turn(deltas_before: int, deltas_after: int) -> list[Line]:
    delta = fake.stream_event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    )
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    return [
        line(fake.system_init("m", "default", "2.1.330")),
        line(fake.stream_event(fake.message_start("msg1", "m"))),
        line(fake.stream_event(start)),
        *[line(delta) for _ in range(deltas_before)],
        line(fake.can_use_tool("req-1", "Bash", {"command": "ls"}, "tool-1")),
        *[line(delta) for _ in range(deltas_after)],
    ]


async def test_lines_are_stored_once_in_order_and_published_only_after_commit(
    world: tuple[Session, RecordingGate, StoreWriter, Path],
) -> None:
    session, gate, writer, db_path = world
    observer = sqlite3.connect(db_path)
    turn = a_turn(deltas_before=300, deltas_after=50)
    big = b'{"type":"assistant","message":{"content":[]},"note":"[truncated]"}'
    tail = [Line(big, 20_000_000, truncated=True), Line(b"not json", 8)]
    tail.append(line(fake.result("done", 5, 10)))
    published: list[Frame] = []
    publishes = 0
    all_read = asyncio.Event()
    publish = session.hub.publish

    def checking_publish(frames: Sequence[Frame]) -> None:
        nonlocal publishes
        (committed,) = observer.execute("SELECT MAX(sequence) FROM events").fetchone()
        assert committed >= frames[-1][0], "frames published before their commit"
        published.extend(frames)
        publishes += 1
        publish(frames)
        # Once every line was read, the last batch is already queued on the writer.
        if session.line_stats.lines == len(turn + tail):
            all_read.set()

    session.hub.publish = checking_publish  # type: ignore[method-assign]
    subscriber = session.hub.subscribe("watcher", 4096)
    batches_before = writer.health().batches_committed

    session.on_lines(turn)
    session.on_lines(tail)
    await all_read.wait()
    await writer.call(lambda _c: None)  # every earlier commit and its publishing are done

    stored_lines = observer.execute(
        "SELECT sequence, CAST(payload AS BLOB) FROM messages ORDER BY sequence"
    ).fetchall()
    assert stored_lines == [(seq, sent.data) for seq, sent in enumerate(turn + tail, 1)]
    stored_events = observer.execute(
        "SELECT sequence, payload FROM events ORDER BY sequence"
    ).fetchall()
    assert [seq for seq, _ in stored_events] == list(range(1, len(stored_events) + 1))
    # Every event published exactly once, in seq order, with the stored bytes.
    assert published == stored_events
    assert subscriber.take(10_000, 1 << 30) == stored_events
    # The bridge saw the request after the lines before it, and its event took the next seq.
    assert gate.requests == ["req-1"]
    (request_line_seq,) = [seq for seq, sent in enumerate(turn, 1) if b"req-1" in sent.data]
    (last_before,) = observer.execute(
        "SELECT MAX(sequence) FROM events WHERE message_sequence <= ?", (request_line_seq,)
    ).fetchone()
    assert [seq for seq, _ in gate.emitted] == [last_before + 1]
    # A handful of appends (and publishes, i.e. client wake-ups) for ~360 lines, not one per line.
    assert publishes <= 8
    assert writer.health().batches_committed - batches_before <= 8
    assert session.line_stats.truncated == 1
    assert session.line_stats.invalid == 1
    observer.close()


class SlowClaude:
    """A supervisor whose claude takes its time to start (as on a busy machine)."""

    state = SupervisorState.SPAWNING

    def __init__(self) -> None:
        self.writing = asyncio.Event()
        self.release = asyncio.Event()
        self.delivered = asyncio.Event()
        self.cancelled = False
        self.lines: list[bytes] = []

    async def send(self, line: bytes) -> None:
        self.writing.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.lines.append(line)
        self.delivered.set()

    async def stop(self) -> None:
        return None


async def test_a_recorded_message_reaches_claude_even_if_its_sender_goes_away(
    world: tuple[Session, RecordingGate, StoreWriter, Path],
) -> None:
    session, _, _, _ = world
    claude = SlowClaude()
    session.supervisor = claude  # type: ignore[assignment]
    sending = asyncio.create_task(session.send_user_message(None, "hello there"))
    await claude.writing.wait()  # recorded and shown to clients; claude still starting

    sending.cancel()  # the client disconnected
    with pytest.raises(asyncio.CancelledError):
        await sending

    assert not claude.cancelled
    claude.release.set()
    await claude.delivered.wait()
    (line,) = claude.lines
    assert json.loads(line)["message"]["content"] == "hello there"
