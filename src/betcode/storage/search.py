"""Full-text search over the stored messages (`message_search`, migration 0011): the text of
every user and assistant message, indexed by triggers as the writer stores its line.

A query is the user's words, all of them required, each a whole word (any case), or the start
of one when it ends in `*` ("deplo*" finds "deploy"). FTS5's own query syntax is never exposed,
so no input is a syntax error. Whole words are the default because they are cheap at any size:
a prefix merges the lists of every word it starts (bench_search.py: ~20 ms against ~0.05 ms for
a word in all of 10,000 messages).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

SNIPPET_TOKENS = 12
SNIPPET_MARK = ("[", "]")  # around each matched word
SNIPPET_ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class SearchHit:
    session_id: str
    session_name: str
    working_directory: str
    sequence: int  # the message's line sequence in its session
    role: str  # "user" or "assistant"
    created_at: float
    snippet: str


def match_expression(text: str) -> str:
    """`text` as an FTS5 expression: every word quoted (a prefix when it ends in `*`), all
    required ("" when there is no word: nothing is searched)."""
    terms = []
    for word in text.split():
        prefix = len(word) > 1 and word.endswith("*")
        quoted = '"' + (word[:-1] if prefix else word).replace('"', '""') + '"'
        terms.append(quoted + "*" if prefix else quoted)
    return " ".join(terms)


def search_messages(
    conn: sqlite3.Connection, text: str, *, limit: int, session_id: str = ""
) -> list[SearchHit]:
    """The messages whose text has every word of `text`, newest first, at most `limit`; only
    session `session_id`'s when given. Newest first is also what keeps a common word cheap: the
    index is walked from its newest row and stops at `limit`, where ranking by relevance
    would score every match; within one session, the index's session column is matched too,
    so other sessions' matches are skipped inside the index."""
    words = match_expression(text)
    if not words:
        return []
    expression = f"body : ({words})"
    where = "message_search MATCH ?"
    params: list[object] = []
    if session_id:
        # The index's own session column narrows the match (migration 0014); the join's
        # comparison keeps it exact.
        expression += ' AND session : "' + session_id.replace("-", "").replace('"', '""') + '"'
        where += " AND m.session_id = ?"
        params.append(session_id)
    params.insert(0, expression)
    params.append(limit)
    opening, closing = SNIPPET_MARK
    rows = conn.execute(
        "SELECT m.session_id, s.name, s.working_directory, m.sequence, m.message_type, "
        f"m.created_at, snippet(message_search, 0, ?, ?, ?, {SNIPPET_TOKENS}) "
        "FROM message_search JOIN messages AS m ON m.id = message_search.rowid "
        "JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE {where} ORDER BY message_search.rowid DESC LIMIT ?",
        [opening, closing, SNIPPET_ELLIPSIS, *params],
    ).fetchall()
    return [
        SearchHit(sid, name, cwd, int(seq), role, float(at), " ".join(snippet.split()))
        for sid, name, cwd, seq, role, at, snippet in rows
    ]
