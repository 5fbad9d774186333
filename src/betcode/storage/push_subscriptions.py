"""The `push_subscriptions` table: where the web client's browsers get Web Push messages."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from betcode.storage.database import transaction


@dataclass(frozen=True, slots=True)
class PushSubscription:
    endpoint: str
    p256dh: str
    auth: str
    client_id: str
    created_at: float
    device_id: str  # the signed-in device that registered it (betcode.web.devices)
    relayed: bool = False  # registered through the relay: pushed through it too

    def subscription_info(self) -> dict[str, object]:
        """The browser's PushSubscription JSON, as the page sent it."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}


def save_subscription(conn: sqlite3.Connection, subscription: PushSubscription, limit: int) -> bool:
    """Stores it; one registered again (same endpoint) gets the new keys. False (nothing
    stored) when `limit` others are stored already."""
    with transaction(conn):
        (stored,) = conn.execute(
            "SELECT count(*) FROM push_subscriptions WHERE endpoint != ?", (subscription.endpoint,)
        ).fetchone()
        if stored >= limit:
            return False
        conn.execute(
            "INSERT INTO push_subscriptions "
            "(endpoint, p256dh, auth, client_id, created_at, device_id, relayed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (endpoint) DO UPDATE SET p256dh = excluded.p256dh, "
            "auth = excluded.auth, client_id = excluded.client_id, "
            "device_id = excluded.device_id, relayed = excluded.relayed",
            (
                subscription.endpoint,
                subscription.p256dh,
                subscription.auth,
                subscription.client_id,
                subscription.created_at,
                subscription.device_id,
                subscription.relayed,
            ),
        )
    return True


def delete_subscription(conn: sqlite3.Connection, endpoint: str) -> bool:
    """False when there was none."""
    with transaction(conn):
        cursor = conn.execute("DELETE FROM push_subscriptions WHERE endpoint = ?", (endpoint,))
    return cursor.rowcount > 0


def list_subscriptions(conn: sqlite3.Connection) -> list[PushSubscription]:
    rows = conn.execute(
        "SELECT endpoint, p256dh, auth, client_id, created_at, device_id, relayed "
        "FROM push_subscriptions ORDER BY created_at"
    ).fetchall()
    return [
        PushSubscription(endpoint, p256dh, auth, client_id, created_at, device_id, bool(relayed))
        for endpoint, p256dh, auth, client_id, created_at, device_id, relayed in rows
    ]
