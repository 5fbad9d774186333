-- What sessions spend, by local day, and the caps a user set or raised (docs/LIMITS.md). Spend
-- rows are kept when their session is deleted: the day's total across the daemon must not drop.
CREATE TABLE spend_days (
    session_id    TEXT NOT NULL,
    day           TEXT NOT NULL,               -- the daemon's local date, YYYY-MM-DD
    cost_usd      REAL NOT NULL DEFAULT 0.0,   -- what claude reported for the turns ending then
    allowance_usd REAL NOT NULL DEFAULT 0.0,   -- daily cap raised for this session that day
    PRIMARY KEY (session_id, day)
);
CREATE INDEX idx_spend_days_day ON spend_days(day);

-- A session's own cost cap (`sessions limit ID --cost-usd X`, or raised by an allowed cost
-- request); without a row the session has daemon.limits.session_cost_usd.
CREATE TABLE session_cost_limits (
    session_id     TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    cost_limit_usd REAL NOT NULL
);
