"""Accounts, refresh tokens and machines: one schema and one set of queries for SQLite (one
relay) and PostgreSQL (several relays sharing it). Queries are written with ``?``
placeholders; the PostgreSQL connection numbers them."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS users (
        id TEXT PRIMARY KEY, username TEXT NOT NULL UNIQUE, email TEXT NOT NULL,
        password_hash TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS refresh_tokens (
        token_hash TEXT PRIMARY KEY, user_id TEXT NOT NULL, family TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL, used INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_family ON refresh_tokens (family)",
    """CREATE TABLE IF NOT EXISTS revoked_families (
        family TEXT PRIMARY KEY, revoked_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS machines (
        machine_id TEXT PRIMARY KEY, name TEXT NOT NULL, owner_id TEXT NOT NULL,
        metadata TEXT NOT NULL, cert_serial TEXT NOT NULL,
        registered_at DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL,
        online_relay TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX IF NOT EXISTS machines_owner ON machines (owner_id)",
    """CREATE TABLE IF NOT EXISTS invites (
        code_hash TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL, uses_left INTEGER NOT NULL)""",
    # A machine's pairing tickets (hashed; one use) and the device logins they made: a device's
    # refresh tokens are one family, its tokens reach its one machine.
    """CREATE TABLE IF NOT EXISTS pairing_tickets (
        ticket_hash TEXT PRIMARY KEY, machine_id TEXT NOT NULL, owner_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
        used INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS device_logins (
        device_id TEXT PRIMARY KEY, owner_id TEXT NOT NULL, machine_id TEXT NOT NULL,
        name TEXT NOT NULL, family TEXT NOT NULL UNIQUE, created_at DOUBLE PRECISION NOT NULL,
        last_used_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS device_logins_owner ON device_logins (owner_id)",
    """CREATE TABLE IF NOT EXISTS relayed_calls (
        at DOUBLE PRECISION NOT NULL, user_id TEXT NOT NULL, machine_id TEXT NOT NULL,
        method TEXT NOT NULL, outcome TEXT NOT NULL)""",
    # Buffered requests the machine refused for good (the offline buffer deleted them), kept
    # for their owner to ask about (ListDroppedRequests) for as long as the buffer keeps any.
    """CREATE TABLE IF NOT EXISTS dropped_requests (
        at DOUBLE PRECISION NOT NULL, owner_id TEXT NOT NULL, machine_id TEXT NOT NULL,
        place TEXT NOT NULL, method TEXT NOT NULL, code TEXT NOT NULL, reason TEXT NOT NULL)""",
)

Row = tuple[Any, ...]


class Database(Protocol):
    async def execute(self, sql: str, *args: object) -> int: ...
    async def fetchone(self, sql: str, *args: object) -> Row | None: ...
    async def fetchall(self, sql: str, *args: object) -> list[Row]: ...
    async def close(self) -> None: ...


class SqliteDatabase:
    """One connection used from worker threads, one statement at a time (a relay's account
    traffic is logins and machine lookups, not a hot path)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA busy_timeout=5000")
        path.chmod(0o600)
        self._lock = threading.Lock()
        for statement in SCHEMA:
            self._connection.execute(statement)

    def _run(self, sql: str, args: Sequence[object], fetch: str) -> Any:
        with self._lock:
            cursor = self._connection.execute(sql, tuple(args))
            if fetch == "one":
                return cursor.fetchone()
            if fetch == "all":
                return cursor.fetchall()
            return cursor.rowcount

    async def execute(self, sql: str, *args: object) -> int:
        result: int = await asyncio.to_thread(self._run, sql, args, "none")
        return result

    async def fetchone(self, sql: str, *args: object) -> Row | None:
        row: Row | None = await asyncio.to_thread(self._run, sql, args, "one")
        return row

    async def fetchall(self, sql: str, *args: object) -> list[Row]:
        rows: list[Row] = await asyncio.to_thread(self._run, sql, args, "all")
        return rows

    def _close(self) -> None:
        # Under the lock: closing while another thread runs a statement crashes sqlite3.
        with self._lock:
            self._connection.close()

    async def close(self) -> None:
        await asyncio.to_thread(self._close)


_PLACEHOLDER = re.compile(r"\?")


def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    counter = iter(range(1, 1000))
    return _PLACEHOLDER.sub(lambda _match: f"${next(counter)}", sql)


class PostgresDatabase:
    def __init__(self, pool: Any) -> None:
        self._pool = pool

    @classmethod
    async def connect(cls, url: str) -> PostgresDatabase:
        import asyncpg

        pool = await asyncpg.create_pool(url, min_size=1, max_size=5)
        # Two relays starting at once must not race on CREATE TABLE.
        async with pool.acquire() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(4242)")
            for statement in SCHEMA:
                await connection.execute(statement)
        return cls(pool)

    async def execute(self, sql: str, *args: object) -> int:
        status: str = await self._pool.execute(numbered(sql), *args)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def fetchone(self, sql: str, *args: object) -> Row | None:
        record = await self._pool.fetchrow(numbered(sql), *args)
        return None if record is None else tuple(record)

    async def fetchall(self, sql: str, *args: object) -> list[Row]:
        return [tuple(record) for record in await self._pool.fetch(numbered(sql), *args)]

    async def close(self) -> None:
        await self._pool.close()


async def open_database(database_url: str | None, sqlite_path: Path) -> Database:
    if database_url:
        return await PostgresDatabase.connect(database_url)
    return SqliteDatabase(sqlite_path)


# --- the queries ---------------------------------------------------------------------------


class UserExists(Exception):
    pass


class MachineTaken(Exception):
    """The machine id is registered to another user."""


class NotFirstUser(Exception):
    """An account already exists (the owner's): this one needs an invitation."""


class InviteRefused(Exception):
    """No such invitation, or it expired or was used up."""


@dataclass(frozen=True)
class User:
    id: str
    username: str
    email: str
    password_hash: str


@dataclass(frozen=True)
class RefreshRow:
    user_id: str
    family: str
    expires_at: float
    used: bool


@dataclass(frozen=True)
class Machine:
    machine_id: str
    name: str
    owner_id: str
    metadata_json: str
    cert_serial: str
    registered_at: float
    last_seen: float
    online_relay: str


@dataclass(frozen=True)
class DeviceLogin:
    device_id: str
    owner_id: str
    machine_id: str
    name: str
    family: str
    created_at: float
    last_used_at: float
    revoked_at: float | None


@dataclass(frozen=True)
class DroppedRequest:
    """A buffered request its machine refused for good: `place` is the receipt its caller
    got (x-betcode-buffered), `code` the gRPC status name."""

    at: float
    owner_id: str
    machine_id: str
    place: str
    method: str
    code: str
    reason: str


DEVICE_COLUMNS = (
    "device_id, owner_id, machine_id, name, family, created_at, last_used_at, revoked_at"
)


class Accounts:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def create_user(
        self,
        user_id: str,
        username: str,
        email: str,
        password_hash: str,
        now: float,
        *,
        only_if_first: bool = False,
    ) -> None:
        """UserExists for a taken name; with ``only_if_first``, creates the relay's first
        account (its owner) only: NotFirstUser once there is one."""
        condition = (
            "WHERE NOT EXISTS (SELECT 1 FROM users)"
            if only_if_first
            else "WHERE true ON CONFLICT (username) DO NOTHING"
        )
        inserted = await self.database.execute(
            "INSERT INTO users (id, username, email, password_hash, created_at) "
            f"SELECT ?, ?, ?, ?, ? {condition}",
            user_id,
            username,
            email,
            password_hash,
            now,
        )
        if inserted != 1:
            raise NotFirstUser(username) if only_if_first else UserExists(username)

    async def add_invite(self, code_hash: str, now: float, expires_at: float, uses: int) -> None:
        await self.database.execute(
            "INSERT INTO invites (code_hash, created_at, expires_at, uses_left) "
            "VALUES (?, ?, ?, ?)",
            code_hash,
            now,
            expires_at,
            uses,
        )

    async def use_invite(self, code_hash: str, now: float) -> None:
        """Takes one use of the invitation (atomically: two registrations cannot share its
        last use); InviteRefused when there is none left."""
        changed = await self.database.execute(
            "UPDATE invites SET uses_left = uses_left - 1 "
            "WHERE code_hash = ? AND uses_left > 0 AND expires_at > ?",
            code_hash,
            now,
        )
        if changed != 1:
            raise InviteRefused

    async def give_back_invite(self, code_hash: str) -> None:
        """A use taken for a registration that then failed (the name was taken)."""
        await self.database.execute(
            "UPDATE invites SET uses_left = uses_left + 1 WHERE code_hash = ?", code_hash
        )

    async def record_relayed_call(
        self, now: float, user_id: str, machine_id: str, method: str, outcome: str
    ) -> None:
        await self.database.execute(
            "INSERT INTO relayed_calls (at, user_id, machine_id, method, outcome) "
            "VALUES (?, ?, ?, ?, ?)",
            now,
            user_id,
            machine_id,
            method,
            outcome,
        )

    async def relayed_calls(self) -> list[Row]:
        """(at, user_id, machine_id, method, outcome), oldest first."""
        return await self.database.fetchall(
            "SELECT at, user_id, machine_id, method, outcome FROM relayed_calls ORDER BY at"
        )

    async def record_dropped(self, dropped: DroppedRequest, older_than: float) -> None:
        """Keeps a refused buffered request for its owner to see; forgets those dropped before
        `older_than`."""
        await self.database.execute("DELETE FROM dropped_requests WHERE at < ?", older_than)
        await self.database.execute(
            "INSERT INTO dropped_requests (at, owner_id, machine_id, place, method, code, "
            "reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            *dataclasses.astuple(dropped),
        )

    async def dropped_requests(self, owner_id: str, machine_id: str) -> list[DroppedRequest]:
        """The owner's requests for the machine that it refused, newest first."""
        rows = await self.database.fetchall(
            "SELECT at, owner_id, machine_id, place, method, code, reason FROM dropped_requests "
            "WHERE owner_id = ? AND machine_id = ? ORDER BY at DESC",
            owner_id,
            machine_id,
        )
        return [DroppedRequest(*row) for row in rows]

    async def user_by_name(self, username: str) -> User | None:
        row = await self.database.fetchone(
            "SELECT id, username, email, password_hash FROM users WHERE username = ?", username
        )
        return None if row is None else User(*row)

    async def user_by_id(self, user_id: str) -> User | None:
        row = await self.database.fetchone(
            "SELECT id, username, email, password_hash FROM users WHERE id = ?", user_id
        )
        return None if row is None else User(*row)

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        await self.database.execute(
            "UPDATE users SET password_hash = ? WHERE id = ?", password_hash, user_id
        )

    async def add_refresh(
        self, token_hash: str, user_id: str, family: str, expires_at: float
    ) -> None:
        await self.database.execute(
            "INSERT INTO refresh_tokens (token_hash, user_id, family, expires_at) "
            "VALUES (?, ?, ?, ?)",
            token_hash,
            user_id,
            family,
            expires_at,
        )

    async def refresh_row(self, token_hash: str) -> RefreshRow | None:
        row = await self.database.fetchone(
            "SELECT user_id, family, expires_at, used FROM refresh_tokens WHERE token_hash = ?",
            token_hash,
        )
        return None if row is None else RefreshRow(row[0], row[1], row[2], bool(row[3]))

    async def use_refresh(self, token_hash: str) -> bool:
        """Marks a refresh token used; False when it already was (a replay)."""
        changed = await self.database.execute(
            "UPDATE refresh_tokens SET used = 1 WHERE token_hash = ? AND used = 0", token_hash
        )
        return changed == 1

    async def revoke_family(self, family: str, now: float) -> None:
        await self.database.execute(
            "INSERT INTO revoked_families (family, revoked_at) VALUES (?, ?) "
            "ON CONFLICT (family) DO NOTHING",
            family,
            now,
        )

    async def family_revoked(self, family: str) -> bool:
        row = await self.database.fetchone(
            "SELECT 1 FROM revoked_families WHERE family = ?", family
        )
        return row is not None

    async def register_machine(self, machine: Machine) -> None:
        """Adds the machine, or re-registers it for the same owner (a new certificate replaces
        the old one, which stops being accepted)."""
        changed = await self.database.execute(
            "INSERT INTO machines (machine_id, name, owner_id, metadata, cert_serial, "
            "registered_at, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (machine_id) DO UPDATE SET name = excluded.name, "
            "metadata = excluded.metadata, cert_serial = excluded.cert_serial, "
            "registered_at = excluded.registered_at "
            "WHERE machines.owner_id = excluded.owner_id",
            machine.machine_id,
            machine.name,
            machine.owner_id,
            machine.metadata_json,
            machine.cert_serial,
            machine.registered_at,
            machine.last_seen,
        )
        if changed != 1:
            raise MachineTaken(machine.machine_id)

    async def machine(self, machine_id: str) -> Machine | None:
        row = await self.database.fetchone(
            "SELECT machine_id, name, owner_id, metadata, cert_serial, registered_at, "
            "last_seen, online_relay FROM machines WHERE machine_id = ?",
            machine_id,
        )
        return None if row is None else Machine(*row)

    async def machine_count(self, owner_id: str) -> int:
        row = await self.database.fetchone(
            "SELECT COUNT(*) FROM machines WHERE owner_id = ?", owner_id
        )
        return int(row[0]) if row else 0

    async def machines_of(self, owner_id: str) -> list[Machine]:
        rows = await self.database.fetchall(
            "SELECT machine_id, name, owner_id, metadata, cert_serial, registered_at, "
            "last_seen, online_relay FROM machines WHERE owner_id = ? ORDER BY machine_id",
            owner_id,
        )
        return [Machine(*row) for row in rows]

    async def remove_machine(self, machine_id: str, owner_id: str, now: float) -> bool:
        """Removes the machine and signs out the devices paired with it (a machine registered
        again under the same id is not reached by them)."""
        changed = await self.database.execute(
            "DELETE FROM machines WHERE machine_id = ? AND owner_id = ?", machine_id, owner_id
        )
        if changed != 1:
            return False
        for (device_id,) in await self.database.fetchall(
            "SELECT device_id FROM device_logins "
            "WHERE machine_id = ? AND owner_id = ? AND revoked_at IS NULL",
            machine_id,
            owner_id,
        ):
            await self.revoke_device(str(device_id), owner_id, now)
        return True

    async def set_cert_serial(self, machine_id: str, serial: str) -> None:
        """The machine's new certificate; the one before it is refused from now on."""
        await self.database.execute(
            "UPDATE machines SET cert_serial = ? WHERE machine_id = ?", serial, machine_id
        )

    async def set_online(self, machine_id: str, relay_id: str, now: float) -> None:
        """``relay_id`` empty = offline."""
        await self.database.execute(
            "UPDATE machines SET online_relay = ?, last_seen = ? WHERE machine_id = ?",
            relay_id,
            now,
            machine_id,
        )

    async def set_offline_if_held_by(self, machine_id: str, relay_id: str, now: float) -> None:
        await self.database.execute(
            "UPDATE machines SET online_relay = '', last_seen = ? "
            "WHERE machine_id = ? AND online_relay = ?",
            now,
            machine_id,
            relay_id,
        )

    async def add_pairing_ticket(
        self, ticket_hash: str, machine: Machine, now: float, expires_at: float
    ) -> None:
        await self.database.execute(
            "INSERT INTO pairing_tickets (ticket_hash, machine_id, owner_id, created_at, "
            "expires_at) VALUES (?, ?, ?, ?, ?)",
            ticket_hash,
            machine.machine_id,
            machine.owner_id,
            now,
            expires_at,
        )
        # The expired ones are of no use to anyone: they go as new ones come.
        await self.database.execute("DELETE FROM pairing_tickets WHERE expires_at <= ?", now)

    async def use_pairing_ticket(self, ticket_hash: str, now: float) -> tuple[str, str] | None:
        """(machine id, owner id) of the ticket, now used (atomically: two phones cannot share
        it); None when it is unknown, used or expired."""
        changed = await self.database.execute(
            "UPDATE pairing_tickets SET used = 1 "
            "WHERE ticket_hash = ? AND used = 0 AND expires_at > ?",
            ticket_hash,
            now,
        )
        if changed != 1:
            return None
        row = await self.database.fetchone(
            "SELECT machine_id, owner_id FROM pairing_tickets WHERE ticket_hash = ?", ticket_hash
        )
        return None if row is None else (str(row[0]), str(row[1]))

    async def add_device(self, device: DeviceLogin) -> None:
        await self.database.execute(
            f"INSERT INTO device_logins ({DEVICE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            device.device_id,
            device.owner_id,
            device.machine_id,
            device.name,
            device.family,
            device.created_at,
            device.last_used_at,
            device.revoked_at,
        )

    async def device_of_family(self, family: str) -> DeviceLogin | None:
        row = await self.database.fetchone(
            f"SELECT {DEVICE_COLUMNS} FROM device_logins WHERE family = ?", family
        )
        return None if row is None else DeviceLogin(*row)

    async def devices_of(self, owner_id: str) -> list[DeviceLogin]:
        rows = await self.database.fetchall(
            f"SELECT {DEVICE_COLUMNS} FROM device_logins WHERE owner_id = ? ORDER BY created_at",
            owner_id,
        )
        return [DeviceLogin(*row) for row in rows]

    async def device_used(self, family: str, now: float) -> None:
        await self.database.execute(
            "UPDATE device_logins SET last_used_at = ? WHERE family = ?", now, family
        )

    async def revoke_device(
        self, device_id: str, owner_id: str, now: float, machine_id: str | None = None
    ) -> str | None:
        """Signs the owner's device out: its token family first (every token of it stops at
        once), then the device's row; its machine, or None when the owner has no such device
        signed in (for `machine_id`, when given)."""
        query = (
            "SELECT family, machine_id FROM device_logins "
            "WHERE device_id = ? AND owner_id = ? AND revoked_at IS NULL"
        )
        row = await self.database.fetchone(query, device_id, owner_id)
        if row is not None and machine_id is not None and row[1] != machine_id:
            row = None
        if row is None:
            return None
        await self.revoke_family(str(row[0]), now)
        await self.database.execute(
            "UPDATE device_logins SET revoked_at = ? WHERE device_id = ?", now, device_id
        )
        return str(row[1])
