-- BetCode daemon schema, version 1 (DIGEST §6, with the decisions in docs/ARCHITECTURE.md).
--
-- Conventions:
--   * every timestamp is REAL Unix epoch seconds (UTC); sub-second precision keeps the order of
--     rows written within one second and lets latency be traced;
--   * booleans are INTEGER 0/1 with a CHECK; JSON is TEXT parsed by the application;
--   * ids are TEXT (UUIDs made by the daemon) except local INTEGER row ids.
-- The migration runner wraps this file in one transaction; it must not BEGIN or COMMIT itself.

CREATE TABLE worktrees (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    path         TEXT NOT NULL UNIQUE,
    branch       TEXT NOT NULL,
    repo_path    TEXT NOT NULL,
    setup_script TEXT,
    created_at   REAL NOT NULL,
    last_active  REAL NOT NULL,
    -- set by startup reconciliation when `path` no longer exists (never auto-deleted)
    stale        INTEGER NOT NULL DEFAULT 0 CHECK (stale IN (0, 1))
);
CREATE INDEX idx_worktrees_repo ON worktrees(repo_path);

-- `id` is the daemon's own id; claude's id (from system.init, passed to --resume) is separate.
CREATE TABLE sessions (
    id                   TEXT PRIMARY KEY,
    claude_session_id    TEXT,
    worktree_id          TEXT REFERENCES worktrees(id) ON DELETE SET NULL,
    status               TEXT NOT NULL DEFAULT 'idle'
                         CHECK (status IN ('idle', 'active', 'completed', 'error')),
    model                TEXT NOT NULL,
    working_directory    TEXT NOT NULL,
    input_lock_client    TEXT,
    created_at           REAL NOT NULL,
    updated_at           REAL NOT NULL,
    total_input_tokens   INTEGER NOT NULL DEFAULT 0,
    total_output_tokens  INTEGER NOT NULL DEFAULT 0,
    total_cost_usd       REAL NOT NULL DEFAULT 0.0,
    last_message_preview TEXT,
    compaction_sequence  INTEGER NOT NULL DEFAULT 0,
    name                 TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idx_sessions_worktree ON sessions(worktree_id);
CREATE INDEX idx_sessions_working_directory ON sessions(working_directory);
CREATE INDEX idx_sessions_status ON sessions(status) WHERE status = 'active';
CREATE INDEX idx_sessions_updated ON sessions(updated_at DESC);

-- One row per NDJSON line: `sequence` is the contiguous per-session LINE seq; `payload` is the
-- line verbatim. direction: 'in' = a stdin line the daemon wrote, 'out' = a stdout line claude
-- wrote. message_type is the line's top-level `type`, free text (the CLI has dozens of kinds).
CREATE TABLE messages (
    id           INTEGER PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    sequence     INTEGER NOT NULL,
    direction    TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    message_type TEXT NOT NULL,
    payload      TEXT NOT NULL,
    created_at   REAL NOT NULL,
    UNIQUE (session_id, sequence)
);

-- One row per AgentEvent: `sequence` is the contiguous per-session EVENT seq
-- (= AgentEvent.sequence); `payload` is the serialized AgentEvent, so replay sends exactly the
-- bytes the live stream sent. message_sequence links to the line it came from (NULL for events
-- the daemon makes itself, e.g. status changes).
CREATE TABLE events (
    session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    sequence         INTEGER NOT NULL,
    message_sequence INTEGER,
    kind             TEXT NOT NULL,
    payload          BLOB NOT NULL,
    created_at       REAL NOT NULL,
    PRIMARY KEY (session_id, sequence)
);

CREATE TABLE permission_grants (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    tool_name  TEXT NOT NULL,
    pattern    TEXT,
    action     TEXT NOT NULL CHECK (action IN ('allow', 'deny')),
    created_at REAL NOT NULL
);
CREATE INDEX idx_grants_session_tool ON permission_grants(session_id, tool_name);

-- DAEMON.md's table, plus what the bridge needs to answer again after a restart:
-- tool_use_id, dialect, is_question, response_payload (JSON of the answer) and delivered
-- (the answer reached a live claude). response_decision is free text chosen by the bridge.
CREATE TABLE pending_permissions (
    request_id           TEXT PRIMARY KEY,
    session_id           TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    tool_name            TEXT NOT NULL,
    tool_description     TEXT,
    input                TEXT NOT NULL,
    tool_use_id          TEXT,
    dialect              TEXT NOT NULL,
    is_question          INTEGER NOT NULL DEFAULT 0 CHECK (is_question IN (0, 1)),
    received_at          REAL NOT NULL,
    forwarded_at         REAL,
    expires_at           REAL NOT NULL,
    last_extended_at     REAL,
    extension_count      INTEGER NOT NULL DEFAULT 0,
    reminder_1h_sent     INTEGER NOT NULL DEFAULT 0 CHECK (reminder_1h_sent IN (0, 1)),
    reminder_24h_sent    INTEGER NOT NULL DEFAULT 0 CHECK (reminder_24h_sent IN (0, 1)),
    push_notification_id TEXT,
    response_received    INTEGER NOT NULL DEFAULT 0 CHECK (response_received IN (0, 1)),
    response_decision    TEXT,
    response_payload     TEXT,
    response_at          REAL,
    delivered            INTEGER NOT NULL DEFAULT 0 CHECK (delivered IN (0, 1))
);
CREATE INDEX idx_pending_session ON pending_permissions(session_id);
CREATE INDEX idx_pending_expires ON pending_permissions(expires_at)
    WHERE response_received = 0;
CREATE INDEX idx_pending_reminders ON pending_permissions(reminder_1h_sent, reminder_24h_sent)
    WHERE response_received = 0;
CREATE INDEX idx_pending_undelivered ON pending_permissions(session_id)
    WHERE response_received = 1 AND delivered = 0;

CREATE TABLE connected_clients (
    client_id      TEXT PRIMARY KEY,
    session_id     TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    client_type    TEXT NOT NULL CHECK (client_type IN ('cli', 'flutter', 'headless')),
    has_input_lock INTEGER NOT NULL DEFAULT 0 CHECK (has_input_lock IN (0, 1)),
    connected_at   REAL NOT NULL,
    last_heartbeat REAL NOT NULL
);
CREATE INDEX idx_clients_session ON connected_clients(session_id);
CREATE INDEX idx_clients_heartbeat ON connected_clients(last_heartbeat);

CREATE TABLE todos (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    subject     TEXT NOT NULL,
    description TEXT,
    active_form TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'in_progress', 'completed')),
    sequence    INTEGER NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX idx_todos_session ON todos(session_id, sequence);

-- SUBAGENTS.md's shape plus upstream's allowed_tools / started_at / exit_code. Deleting the
-- parent session deletes its subagents (as upstream does), so session deletion never fails.
CREATE TABLE subagents (
    id                       TEXT PRIMARY KEY,
    parent_session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    session_id               TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name                     TEXT NOT NULL,
    status                   TEXT NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'running', 'completed', 'failed',
                                               'cancelled')),
    prompt                   TEXT NOT NULL,
    model                    TEXT,
    working_directory        TEXT NOT NULL,
    allowed_tools            TEXT NOT NULL DEFAULT '[]',
    auto_approve_permissions INTEGER NOT NULL DEFAULT 0
                             CHECK (auto_approve_permissions IN (0, 1)),
    max_turns                INTEGER NOT NULL DEFAULT 50,
    result_summary           TEXT,
    exit_code                INTEGER,
    created_at               REAL NOT NULL,
    started_at               REAL,
    completed_at             REAL
);
CREATE INDEX idx_subagents_parent ON subagents(parent_session_id);
CREATE INDEX idx_subagents_status ON subagents(status) WHERE status IN ('pending', 'running');

CREATE TABLE orchestrations (
    id                TEXT PRIMARY KEY,
    parent_session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    strategy          TEXT NOT NULL CHECK (strategy IN ('parallel', 'sequential', 'dag')),
    status            TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    total_steps       INTEGER NOT NULL,
    completed_steps   INTEGER NOT NULL DEFAULT 0,
    failed_steps      INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    completed_at      REAL
);
CREATE INDEX idx_orchestrations_parent ON orchestrations(parent_session_id);

CREATE TABLE orchestration_steps (
    id                       TEXT PRIMARY KEY,
    orchestration_id         TEXT NOT NULL REFERENCES orchestrations(id) ON DELETE CASCADE,
    subagent_id              TEXT REFERENCES subagents(id) ON DELETE SET NULL,
    name                     TEXT NOT NULL,
    prompt                   TEXT NOT NULL,
    model                    TEXT,
    working_directory        TEXT,
    allowed_tools            TEXT,
    depends_on               TEXT,
    auto_approve_permissions INTEGER NOT NULL DEFAULT 0
                             CHECK (auto_approve_permissions IN (0, 1)),
    status                   TEXT NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'running', 'completed', 'failed',
                                               'blocked')),
    sequence                 INTEGER NOT NULL,
    created_at               REAL NOT NULL,
    completed_at             REAL
);
CREATE INDEX idx_orch_steps ON orchestration_steps(orchestration_id, sequence);

-- Audit rows outlive their session (no FK): tool_input_hash is a SHA-256, never the raw input.
CREATE TABLE audit_log (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id           TEXT NOT NULL UNIQUE,
    event_type         TEXT NOT NULL CHECK (event_type IN (
                           'auto_approve_tool_call', 'permission_grant', 'permission_deny',
                           'permission_revoke', 'subagent_spawn', 'subagent_complete',
                           'subagent_fail', 'subagent_cancel', 'subagent_timeout',
                           'session_create', 'session_resume', 'session_complete',
                           'session_error', 'rate_limit_exceeded', 'tool_validation_fail',
                           'auth_success', 'auth_failure')),
    severity           TEXT NOT NULL DEFAULT 'info'
                       CHECK (severity IN ('debug', 'info', 'warn', 'error', 'critical')),
    session_id         TEXT,
    subagent_id        TEXT,
    parent_session_id  TEXT,
    actor_type         TEXT NOT NULL CHECK (actor_type IN ('user', 'daemon', 'subagent', 'system')),
    actor_id           TEXT NOT NULL,
    tool_name          TEXT,
    tool_input_hash    TEXT,
    tool_input_preview TEXT,
    outcome            TEXT NOT NULL CHECK (outcome IN ('success', 'failure', 'denied', 'timeout')),
    error_code         TEXT,
    error_message      TEXT CHECK (error_message IS NULL OR length(error_message) <= 1024),
    context            TEXT,
    client_ip          TEXT,
    created_at         REAL NOT NULL,
    expires_at         REAL NOT NULL
);
CREATE INDEX idx_audit_session ON audit_log(session_id, created_at DESC)
    WHERE session_id IS NOT NULL;
CREATE INDEX idx_audit_subagent ON audit_log(subagent_id, created_at DESC)
    WHERE subagent_id IS NOT NULL;
CREATE INDEX idx_audit_type ON audit_log(event_type, created_at DESC);
CREATE INDEX idx_audit_expiry ON audit_log(expires_at) WHERE expires_at > 0;
CREATE INDEX idx_audit_actor ON audit_log(actor_type, actor_id, created_at DESC);
CREATE INDEX idx_audit_tool ON audit_log(tool_name, created_at DESC) WHERE tool_name IS NOT NULL;

-- Client actions already applied (UUIDv7 keys), remembered 24 h so a replayed action is a no-op.
CREATE TABLE processed_idempotency_keys (
    key          TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    processed_at REAL NOT NULL
);
CREATE INDEX idx_idempotency_processed ON processed_idempotency_keys(processed_at);
