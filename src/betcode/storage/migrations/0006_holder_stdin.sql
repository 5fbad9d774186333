-- Lines for claude's stdin on their way through its holder (claude/holder/client.py): each is
-- committed here before it is sent and deleted once the holder confirms it took it, so a daemon
-- that dies with a line in flight leaves it to the next daemon, which sends it again under the
-- same key (the holder takes each key once).
CREATE TABLE holder_stdin (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    holder_id  TEXT NOT NULL,
    key        TEXT NOT NULL,
    line       BLOB NOT NULL,
    PRIMARY KEY (holder_id, key)
);
CREATE INDEX idx_holder_stdin_session ON holder_stdin(session_id);
