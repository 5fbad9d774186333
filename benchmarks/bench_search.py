"""`betcode sessions search` figures: full-text search over 100,000 stored messages.

    .venv/bin/python benchmarks/bench_search.py [--quick] [--json]

A database gets 100 sessions of 1,000 stored lines each (half user, half assistant messages of
20-60 words drawn from a 5,000-word vocabulary, Zipf-like, so some words are in most messages
and others in a handful), written through the StoreWriter so the index is built by the triggers
of migrations 0011 and 0014, as the daemon builds it. Then:

* search latency: `storage.search.search_messages` on a reader connection (what the daemon's
  HistoryService runs per request), 20 hits newest first, for a rare word, a common word
  (in most messages), two words, a word prefix and one session's messages; p50 / p99;
* the cost of the index on writes: lines/s appended through the writer with the index, and
  with its triggers dropped (same lines, a fresh database).

Figures are printed, never asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from betcode.storage import Database, MessageRow, StoreWriter, open_database
from betcode.storage.rows import INSERT_MESSAGE
from betcode.storage.search import search_messages
from betcode.storage.sessions import create_session

SESSIONS = 100
LINES_PER_SESSION = 1000
VOCABULARY = 5000
SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "gu", "an", "ve", "zo", "bi")
HITS = 20
BATCH = 500


def words() -> list[str]:
    rng = random.Random(7)
    made: set[str] = set()
    while len(made) < VOCABULARY:
        made.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(made)


def lines(vocabulary: Sequence[str], sessions: int) -> list[MessageRow]:
    rng = random.Random(11)
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf-like
    rows: list[MessageRow] = []
    now = time.time()
    for session in range(sessions):
        for sequence in range(1, LINES_PER_SESSION + 1):
            text = " ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 60)))
            role = "user" if sequence % 2 else "assistant"
            content: object = text if role == "user" else [{"type": "text", "text": text}]
            payload = json.dumps({"type": role, "message": {"role": role, "content": content}})
            rows.append(
                MessageRow(f"s{session}", sequence, "out", role, payload.encode(), now + sequence)
            )
    return rows


def new_database(path: Path, sessions: int, *, indexed: bool) -> Database:
    database = open_database(path)
    conn = database.connect()
    for session in range(sessions):
        create_session(
            conn, session_id=f"s{session}", model="m", working_directory="/", now=time.time()
        )
    if not indexed:
        conn.execute("DROP TRIGGER message_search_insert")
    conn.commit()
    conn.close()
    return database


async def store(database: Database, rows: Sequence[MessageRow]) -> float:
    """Append `rows` through the writer in batches; lines per second."""
    writer = StoreWriter(database)
    started = time.perf_counter()
    for start in range(0, len(rows), BATCH):
        await writer.call(functools.partial(_insert, part=rows[start : start + BATCH]))
    elapsed = time.perf_counter() - started
    await writer.close()
    return len(rows) / elapsed


def _insert(conn: sqlite3.Connection, part: Sequence[MessageRow]) -> None:
    conn.executemany(
        INSERT_MESSAGE,
        [
            (r.session_id, r.sequence, r.direction, r.message_type, r.payload, r.created_at)
            for r in part
        ],
    )


def latencies(run: Callable[[], object], times: int) -> dict[str, float]:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        taken.append((time.perf_counter() - started) * 1000)
    taken.sort()
    return {
        "p50_ms": round(statistics.median(taken), 2),
        "p99_ms": round(taken[min(len(taken) - 1, int(len(taken) * 0.99))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages instead")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    sessions = SESSIONS // 10 if args.quick else SESSIONS
    vocabulary = words()
    rows = lines(vocabulary, sessions)
    figures: dict[str, object] = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "messages": len(rows),
        "load_average": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory() as directory:
        plain = new_database(Path(directory) / "plain.db", sessions, indexed=False)
        figures["writer_lines_per_s_without_index"] = round(asyncio.run(store(plain, rows)))
        database = new_database(Path(directory) / "search.db", sessions, indexed=True)
        figures["writer_lines_per_s_with_index"] = round(asyncio.run(store(database, rows)))
        conn = database.connect()
        rare, common = vocabulary[-1], vocabulary[0]
        queries = {  # name: (words, session)
            f"rare word ({rare})": (rare, ""),
            f"common word ({common})": (common, ""),
            f"two words ({vocabulary[3]} {vocabulary[40]})": (
                f"{vocabulary[3]} {vocabulary[40]}",
                "",
            ),
            f"word prefix ({vocabulary[100][:3]}*)": (vocabulary[100][:3] + "*", ""),
            f"rare word in one session ({rare})": (rare, "s3"),
            f"common word in one session ({common})": (common, "s3"),
        }
        times = 20 if args.quick else 100
        for name, (text, session) in queries.items():

            def query(text: str = text, session: str = session, limit: int = HITS) -> object:
                return search_messages(conn, text, limit=limit, session_id=session)

            matched = len(search_messages(conn, text, limit=len(rows), session_id=session))
            figures[name] = {**latencies(query, times), "matching_messages": matched}
        conn.close()
    for name, value in figures.items():
        print(f"{name:40} {value}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
