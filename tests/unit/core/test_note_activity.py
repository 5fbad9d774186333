"""Extending pending permissions on client activity never fails the client's request."""

from __future__ import annotations

import logging
import sqlite3
from types import SimpleNamespace
from typing import Any

import pytest

from betcode.core.converse import note_activity


class StoreFailingBridge:
    def __init__(self) -> None:
        self.calls = 0

    async def on_session_activity(self, session: Any) -> None:
        self.calls += 1
        raise sqlite3.OperationalError("disk I/O error")


async def test_a_store_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    bridge = StoreFailingBridge()
    with caplog.at_level(logging.ERROR, logger="betcode.core.converse"):
        await note_activity(bridge, SimpleNamespace(id="s1"))  # type: ignore[arg-type]
    assert bridge.calls == 1
    assert "session s1: pending permissions not extended" in caplog.text
    assert "disk I/O error" in caplog.text
