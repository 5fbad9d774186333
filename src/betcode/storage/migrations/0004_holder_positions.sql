-- How far into the stdout of each session's holder (the process that keeps claude running
-- across daemon restarts) the daemon has committed: written in the transaction of the lines.
CREATE TABLE holder_positions (
    session_id    TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    holder_id     TEXT NOT NULL,
    stdout_offset INTEGER NOT NULL,
    updated_at    REAL NOT NULL
);
