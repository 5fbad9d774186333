"""The `world` of the session tests: one Session on a real database file, its store writer and
a RecordingGate for a permission bridge; no claude is ever started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from session_parts import RecordingGate

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.session import Session
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.sessions import create_session


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Session, RecordingGate, StoreWriter, Path]]:
    database = open_database(tmp_path / "daemon.db")
    writer = StoreWriter(database)
    reader = StoreReader(database)
    record = await writer.call(
        lambda c: create_session(
            c, session_id="s1", model="m", working_directory=str(tmp_path), now=1.0
        )
    )
    gate = RecordingGate()
    context = SessionContext(
        writer=writer,
        reader=reader,
        claude_binary=ClaudeBinary(tmp_path / "claude-never-started", BinarySource.FLAG),
        child_env=dict,
        process_policy=SupervisorPolicy(),
        permissions=gate,
        settings=SessionSettings(),
    )
    session = Session(record, context, line_seq=0, event_seq=0)
    yield session, gate, writer, database.path
    await session.close()
    await writer.close()
    reader.close()
