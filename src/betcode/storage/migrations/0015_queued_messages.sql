-- Messages waiting for a turn slot (daemon.limits.max_running_turns, docs/LIMITS.md), in order
-- (id): a restarted daemon queues them again. A row goes when its turn starts or is cancelled.
CREATE TABLE queued_messages (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    text       TEXT NOT NULL,
    queued_at  REAL NOT NULL
);
CREATE INDEX idx_queued_messages_session ON queued_messages(session_id);
