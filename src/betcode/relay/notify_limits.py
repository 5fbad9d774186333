"""Dedup and rate limits of attention notifications (TOP-06; remote/attention_limits.py) shared
by every relay instance on the NATS cluster through a JetStream key-value bucket, so a daemon
whose tunnel moves to another instance keeps its counts there.

In the shared bucket each key holds a window's list of times (JSON), written only over the
revision that was read (compare-and-set): two relays counting at once, one reads again. A
notification id is recorded with `create`, which only one relay wins."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence

import nats.errors
import nats.js.errors
from nats.aio.client import Client as Nats
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from betcode.remote.attention_limits import MemoryLimits, Window

log = logging.getLogger(__name__)

BUCKET = "betcode_notify"
KEPT_SECONDS = 2 * 86400  # longer than the longest window; an id is not notified again before
CAS_ATTEMPTS = 5


class SharedLimits:
    """The JetStream key-value bucket; when NATS fails, this relay's memory (logged)."""

    def __init__(self, kv: KeyValue, clock: Callable[[], float] = time.time) -> None:
        self._kv = kv
        self._clock = clock
        self._fallback = MemoryLimits(clock)

    @classmethod
    async def open(cls, nc: Nats, clock: Callable[[], float] = time.time) -> SharedLimits:
        config = KeyValueConfig(
            bucket=BUCKET, history=1, ttl=KEPT_SECONDS, storage=StorageType.FILE
        )
        return cls(await nc.jetstream().create_key_value(config), clock)

    async def first_time(self, key: str) -> bool:
        try:
            await self._kv.create(_kv_key("id", key), b"1")
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        except (nats.errors.Error, nats.js.errors.Error) as error:
            log.warning("notification ids: NATS failed (%s); this relay's memory decides", error)
            return await self._fallback.first_time(key)
        return True

    async def admit(self, windows: Sequence[Window]) -> bool:
        try:
            return await self._admit(windows)
        except (nats.errors.Error, nats.js.errors.Error) as error:
            log.warning("notification limits: NATS failed (%s); this relay counts alone", error)
            return await self._fallback.admit(windows)

    async def _admit(self, windows: Sequence[Window]) -> bool:
        for _ in range(CAS_ATTEMPTS):
            now = self._clock()
            counted = [await self._read(key, seconds, now) for key, seconds, _ in windows]
            pairs = list(zip(windows, counted, strict=True))
            if any(len(events) >= limit for (_, _, limit), (events, _) in pairs):
                return False
            try:
                for (key, _seconds, _limit), (events, revision) in pairs:
                    await self._write(key, [*events, now], revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # another relay counted meanwhile: look again
            return True
        return False

    async def _read(self, key: str, seconds: float, now: float) -> tuple[list[float], int | None]:
        try:
            entry = await self._kv.get(_kv_key("n", key))
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return [], None
        events = [float(t) for t in json.loads(entry.value or b"[]") if t > now - seconds]
        return events, entry.revision

    async def _write(self, key: str, events: list[float], revision: int | None) -> None:
        data = json.dumps(events).encode()
        if revision is None:
            await self._kv.create(_kv_key("n", key), data)
        else:
            await self._kv.update(_kv_key("n", key), data, last=revision)


def _kv_key(kind: str, key: str) -> str:
    """Machine and session ids may hold characters a KV key may not: hashed."""
    return f"{kind}.{hashlib.sha256(key.encode()).hexdigest()[:40]}"
