-- The web client's signed-in browsers (betcode.web.devices). A one-time link from
-- `betcode web` is exchanged once, before it expires, for a device credential; only hashes are
-- kept. A device is valid while not revoked and made under the current access token
-- (rotating the token signs every device out).
CREATE TABLE web_devices (
    device_id         TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    credential_hash   TEXT NOT NULL UNIQUE,  -- sha256 hex of the credential
    token_fingerprint TEXT NOT NULL,         -- sha256 hex of the access token it was made under
    created_at        REAL NOT NULL,
    last_seen_at      REAL,
    revoked_at        REAL
);

CREATE TABLE web_links (
    link_hash         TEXT PRIMARY KEY,  -- sha256 hex of the link's secret
    token_fingerprint TEXT NOT NULL,     -- a rotation voids the links made before it
    expires_at        REAL NOT NULL,
    used_at           REAL,
    device_id         TEXT               -- the device it was exchanged for
);
