"""The `web_devices` and `web_links` tables: the web client's one-time sign-in links and the
device credentials they are exchanged for (betcode.web.devices). Only hashes are stored."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from betcode.storage.database import transaction


@dataclass(frozen=True, slots=True)
class WebDevice:
    device_id: str
    name: str
    credential_hash: str
    token_fingerprint: str
    created_at: float
    last_seen_at: float | None
    revoked_at: float | None
    relay_device_id: str | None = None  # the relay's device login it paired with, if any


_COLUMNS = (
    "device_id, name, credential_hash, token_fingerprint, created_at, last_seen_at, revoked_at, "
    "relay_device_id"
)


def insert_link(
    conn: sqlite3.Connection, link_hash: str, token_fingerprint: str, expires_at: float
) -> None:
    with transaction(conn):
        conn.execute(
            "INSERT INTO web_links (link_hash, token_fingerprint, expires_at) VALUES (?, ?, ?)",
            (link_hash, token_fingerprint, expires_at),
        )


def redeem_link(conn: sqlite3.Connection, link_hash: str, device: WebDevice) -> bool:
    """Uses the link for `device` and stores the device, atomically; False (nothing stored)
    for a link unknown, used already, expired at the device's creation time or made under
    another access token."""
    with transaction(conn):
        cursor = conn.execute(
            "UPDATE web_links SET used_at = ?, device_id = ? WHERE link_hash = ? "
            "AND used_at IS NULL AND expires_at > ? AND token_fingerprint = ?",
            (
                device.created_at,
                device.device_id,
                link_hash,
                device.created_at,
                device.token_fingerprint,
            ),
        )
        if cursor.rowcount != 1:
            return False
        conn.execute(
            f"INSERT INTO web_devices ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                device.device_id,
                device.name,
                device.credential_hash,
                device.token_fingerprint,
                device.created_at,
                device.last_seen_at,
                device.revoked_at,
                device.relay_device_id,
            ),
        )
    return True


def list_devices(conn: sqlite3.Connection) -> list[WebDevice]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM web_devices ORDER BY created_at").fetchall()
    return [WebDevice(*row) for row in rows]


def revoke_device(conn: sqlite3.Connection, device_id: str, at: float) -> bool:
    """False when there is no such device still valid."""
    with transaction(conn):
        cursor = conn.execute(
            "UPDATE web_devices SET revoked_at = ? WHERE device_id = ? AND revoked_at IS NULL",
            (at, device_id),
        )
    return cursor.rowcount == 1


def mark_seen(conn: sqlite3.Connection, device_id: str, at: float) -> None:
    with transaction(conn):
        conn.execute("UPDATE web_devices SET last_seen_at = ? WHERE device_id = ?", (at, device_id))
