-- Web Push subscriptions of the web client's browsers (betcode.push): the push service's
-- endpoint URL and the browser's keys its messages are encrypted to. A push service that
-- answers 404 or 410 for an endpoint has dropped it, and so is its row.
CREATE TABLE push_subscriptions (
    endpoint   TEXT PRIMARY KEY,
    p256dh     TEXT NOT NULL,  -- the browser's P-256 public key, base64url (RFC 8291)
    auth       TEXT NOT NULL,  -- the browser's 16-byte auth secret, base64url
    client_id  TEXT NOT NULL,  -- the page that registered it (`web-...`)
    created_at REAL NOT NULL
);
