"""The kinds of log rows the writer appends (lines and events, which replay reads back).

They are NamedTuples whose field order is the INSERT column order, so a batch goes to
`executemany` without any per-row conversion.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Direction = Literal["in", "out"]


class MessageRow(NamedTuple):
    """One NDJSON line, verbatim, under its per-session LINE seq."""

    session_id: str
    sequence: int
    direction: Direction  # "in": a stdin line the daemon wrote; "out": a stdout line of claude
    message_type: str  # the line's top-level `type`
    payload: bytes  # the raw line without its newline
    created_at: float


class EventRow(NamedTuple):
    """One serialized AgentEvent under its per-session EVENT seq (= AgentEvent.sequence)."""

    session_id: str
    sequence: int
    message_sequence: int | None  # the line it was translated from; None for daemon events
    kind: str  # the AgentEvent oneof case, e.g. "text_delta"
    payload: bytes  # AgentEvent.SerializeToString(), shared with the live stream
    created_at: float


class HolderPositionRow(NamedTuple):
    """How far into claude's stdout a session's holder has been committed: stored in the same
    transaction as the lines up to there, so a restarted daemon continues exactly after them."""

    session_id: str
    holder_id: str
    stdout_offset: int
    created_at: float

    @property
    def payload(self) -> bytes:
        return b""


class QueuedMessageTakenRow(NamedTuple):
    """A queued message (`queued_messages`) whose turn starts: its row is deleted in the same
    transaction as the user line it became, so a daemon killed at any point has either still
    queued it or recorded it, never neither nor both."""

    session_id: str
    queued_id: int
    created_at: float

    @property
    def payload(self) -> bytes:
        return b""


class IdempotencyKeyRow(NamedTuple):
    """A client's idempotency key (`processed_idempotency_keys`), recorded in the same
    transaction as what its message became (its user line): a daemon killed at any point has
    recorded both or neither, so a message delivered again is either applied (it was not
    recorded) or recognised (it was), never lost nor sent twice."""

    session_id: str
    key: str
    created_at: float

    @property
    def payload(self) -> bytes:
        return b""


# Updated in place: INSERT OR REPLACE would delete and re-insert the row, rewriting its primary
# key index too, one more WAL page in every commit of a held claude's lines.
ON_HOLDER_POSITION_CONFLICT = (
    " ON CONFLICT (session_id) DO UPDATE SET holder_id = excluded.holder_id,"
    " stdout_offset = excluded.stdout_offset, updated_at = excluded.updated_at"
)
UPSERT_HOLDER_POSITION = (
    "INSERT INTO holder_positions (session_id, holder_id, stdout_offset, updated_at) "
    "VALUES (?, ?, ?, ?)" + ON_HOLDER_POSITION_CONFLICT
)


LogRow = MessageRow | EventRow | HolderPositionRow | QueuedMessageTakenRow | IdempotencyKeyRow

# The message payload is bound as a BLOB and stored as TEXT without decoding: the line is kept
# byte for byte and stays usable by SQLite's JSON functions.
INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, sequence, direction, message_type, payload, created_at) "
    "VALUES (?, ?, ?, ?, CAST(? AS TEXT), ?)"
)
INSERT_EVENT = (
    "INSERT INTO events (session_id, sequence, message_sequence, kind, payload, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
DELETE_QUEUED_MESSAGE = "DELETE FROM queued_messages WHERE id = ?"
INSERT_IDEMPOTENCY_KEY = (
    "INSERT INTO processed_idempotency_keys (key, session_id, processed_at) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO NOTHING"
)
