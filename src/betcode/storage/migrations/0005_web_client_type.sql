-- The daemon's web client is recorded as client type 'web' (it was 'flutter'). SQLite cannot
-- change a CHECK constraint in place: the table is rebuilt with every row kept (no other table
-- references connected_clients, so dropping the old one cascades nothing). Rows a web page
-- left as 'flutter' stay 'flutter': startup reconciliation clears the table anyway.
CREATE TABLE connected_clients_new (
    client_id      TEXT PRIMARY KEY,
    session_id     TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    client_type    TEXT NOT NULL CHECK (client_type IN ('cli', 'flutter', 'headless', 'web')),
    has_input_lock INTEGER NOT NULL DEFAULT 0 CHECK (has_input_lock IN (0, 1)),
    connected_at   REAL NOT NULL,
    last_heartbeat REAL NOT NULL
);
INSERT INTO connected_clients_new
    (client_id, session_id, client_type, has_input_lock, connected_at, last_heartbeat)
SELECT client_id, session_id, client_type, has_input_lock, connected_at, last_heartbeat
FROM connected_clients;
DROP TABLE connected_clients;
ALTER TABLE connected_clients_new RENAME TO connected_clients;
CREATE INDEX idx_clients_session ON connected_clients(session_id);
CREATE INDEX idx_clients_heartbeat ON connected_clients(last_heartbeat);
