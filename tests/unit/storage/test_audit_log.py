"""The audit recorder on a real database file: ids, hashes, previews without secrets, capped
error texts, retention, and the check the daemon makes before it starts."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.storage import Database, StoreWriter, open_database
from betcode.storage.audit import (
    RETENTION_SECONDS,
    AuditEvent,
    AuditLogMissing,
    AuditRecorder,
    audit_row,
    input_hash,
    require_audit_log,
    uuid7,
)

NOW = 1_700_000_000.0
DAY = 86_400


def grant(**fields: Any) -> AuditEvent:
    values: dict[str, Any] = {
        "event_type": "permission_grant",
        "actor_type": "user",
        "actor_id": "client-1",
        "outcome": "success",
        "session_id": "s1",
        "tool_name": "Bash",
        "tool_input": {"command": "git status", "description": "Show status"},
    }
    values.update(fields)
    return AuditEvent(**values)


def stored(path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute("SELECT * FROM audit_log ORDER BY id")]
    finally:
        conn.close()


# ---- ids and hashes ----


def test_event_ids_are_uuid7_carrying_their_millisecond() -> None:
    made = uuid.UUID(uuid7(NOW))
    assert (made.version, made.variant) == (7, uuid.RFC_4122)
    assert made.int >> 80 == int(NOW * 1000)
    later = [uuid7(NOW + step / 1000) for step in range(1, 50)]
    assert sorted(later) == later  # time-ordered across milliseconds
    assert len({uuid7(NOW) for _ in range(1000)}) == 1000  # random within one


def test_the_input_hash_is_sha256_of_canonical_json_whatever_the_key_order() -> None:
    digest = input_hash({"command": "ls", "description": "List"})
    assert digest == input_hash({"description": "List", "command": "ls"})
    canonical = '{"command":"ls","description":"List"}'
    assert digest == hashlib.sha256(canonical.encode()).hexdigest()
    assert digest != input_hash({"command": "ls -a", "description": "List"})


# ---- rows ----


def test_a_row_keeps_hash_and_preview_never_the_raw_input() -> None:
    content = "line one\n" * 500
    row = audit_row(
        grant(tool_name="Write", tool_input={"file_path": "/p/a.txt", "content": content}), NOW
    )
    assert row.tool_input_preview == "/p/a.txt"
    assert row.tool_input_hash == input_hash({"file_path": "/p/a.txt", "content": content})
    assert "line one" not in json.dumps(row)
    assert row.created_at == NOW
    assert row.expires_at == NOW + RETENTION_SECONDS >= NOW + 90 * DAY


def test_the_preview_is_one_line_of_at_most_256_characters() -> None:
    row = audit_row(grant(tool_input={"command": "echo " + "word " * 200 + "\n\tdone"}), NOW)
    assert row.tool_input_preview is not None
    assert len(row.tool_input_preview) == 256
    assert row.tool_input_preview.endswith("…")
    assert "\n" not in row.tool_input_preview
    assert "\t" not in row.tool_input_preview


def test_an_input_without_a_known_subject_is_previewed_as_redacted_json() -> None:
    row = audit_row(
        grant(tool_name="mcp__db__query", tool_input={"sql": "select 1", "password": "pw1"}), NOW
    )
    assert row.tool_input_preview == '{"password":[REDACTED],"sql":"select 1"}'


def test_error_messages_are_redacted_and_capped_at_1_kb() -> None:
    secret = "sk-ant-api03-" + "Q" * 40
    event = grant(error_message=f"stderr: key {secret} rejected; " + "é" * 2000)
    row = audit_row(event, NOW)
    assert row.error_message is not None
    assert secret not in row.error_message
    assert "[REDACTED]" in row.error_message
    assert len(row.error_message.encode()) <= 1024
    assert row.error_message.endswith("…")


def test_context_free_text_is_redacted_but_ids_and_hashes_are_kept() -> None:
    digest = input_hash({"command": "echo edited"})
    context = {
        "message": "no, use token=abc123secret instead",
        "edited_input_hash": digest,
        "request_id": "toolu_01AbCdEfGhIjKlMnOpQrStUvWx",
    }
    row = audit_row(grant(context=context), NOW)
    assert row.context is not None
    assert json.loads(row.context) == {**context, "message": "no, use token=[REDACTED] instead"}


SECRETS = [
    (
        "curl -H 'Authorization: Bearer abcdefgh12345678' https://api.example.com",
        "abcdefgh12345678",
    ),
    ("export ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnop", "sk-ant-api03-abcdefghijklmnop"),
    ("OPENAI_API_KEY=sk-proj-0123456789abcdef python app.py", "sk-proj-0123456789abcdef"),
    (
        "git push https://oauth2:glpat-abcdefghijklmnopqrst@gitlab.com/x.git",
        "glpat-abcdefghijklmnopqrst",
    ),
    ("git clone https://bob:hunter2pass@github.com/x/y", "hunter2pass"),
    (
        "gh auth login --with-token ghp_abcdefghijklmnopqrstuvwxyz0123",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
    ),
    ("aws s3 ls # AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("mysql -u root --password=s3cr3t! db", "s3cr3t!"),
    ("mysql -u root --password 's3cr3t with space' db", "s3cr3t with space"),
    ('PGPASSWORD="pa ss" psql', "pa ss"),
    ("http POST x X-Auth-Token:0f9a8b7c6d5e", "0f9a8b7c6d5e"),
    ('{"client_secret": "zz-top-secret-zz"}', "zz-top-secret-zz"),
    (
        "echo eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig_nature",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    (
        "use key 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "9f86d081884c7d659a2feaa0c55ad015",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ),
]


@pytest.mark.parametrize(("command", "secret"), SECRETS)
def test_what_looks_like_a_secret_never_reaches_the_preview(command: str, secret: str) -> None:
    row = audit_row(grant(tool_input={"command": command}), NOW)
    assert row.tool_input_preview is not None
    assert secret not in row.tool_input_preview
    assert "[REDACTED]" in row.tool_input_preview


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "ls -la /tmp/pytest-of-root/pytest-12/test_run0/project",
        "npm run build -- --watch",
        "grep -rn 'def main' src/",
        "python -m pytest tests/unit -q",
    ],
)
def test_ordinary_commands_are_previewed_as_they_are(command: str) -> None:
    assert audit_row(grant(tool_input={"command": command}), NOW).tool_input_preview == command


@given(
    st.dictionaries(
        st.text(max_size=20),
        st.recursive(
            st.text() | st.integers() | st.none(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        ),
        max_size=5,
    ),
    st.sampled_from([s for _, s in SECRETS[:9]]),
)
def test_any_input_gives_a_short_preview_without_the_planted_secret(
    tool_input: dict[str, Any], secret: str
) -> None:
    planted = {**tool_input, "command": f"run --token {secret} now"}
    row = audit_row(grant(tool_input=planted), NOW)
    assert row.tool_input_preview is not None
    assert len(row.tool_input_preview) <= 256
    assert secret not in row.tool_input_preview


# ---- recording through the writer ----


async def test_recorded_events_are_stored_with_every_column(
    database: Database, writer: StoreWriter
) -> None:
    recorder = AuditRecorder(writer, clock=lambda: NOW)
    recorder.record(grant())
    recorder.record(
        AuditEvent(
            event_type="session_error",
            actor_type="daemon",
            actor_id="claude-supervisor",
            outcome="failure",
            severity="error",
            session_id="s1",
            error_code="SUBPROCESS_CRASHED",
            error_message="claude killed by SIGKILL",
        )
    )
    await recorder.flush()
    first, second = stored(database.path)
    assert first["event_type"] == "permission_grant"
    assert (first["actor_type"], first["actor_id"], first["outcome"]) == (
        "user",
        "client-1",
        "success",
    )
    assert first["tool_input_preview"] == "git status"
    assert first["tool_input_hash"] == input_hash(
        {"command": "git status", "description": "Show status"}
    )
    assert (first["created_at"], first["expires_at"]) == (NOW, NOW + RETENTION_SECONDS)
    assert uuid.UUID(first["event_id"]).version == 7
    assert (second["event_type"], second["severity"], second["error_code"]) == (
        "session_error",
        "error",
        "SUBPROCESS_CRASHED",
    )
    assert second["tool_input_hash"] is None
    assert second["tool_input_preview"] is None


async def test_a_row_the_schema_refuses_is_logged_and_nothing_raises(
    database: Database, writer: StoreWriter, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = AuditRecorder(writer)
    recorder.record(grant(event_type="made_up"))
    recorder.record(grant())
    await recorder.flush()
    assert [row["event_type"] for row in stored(database.path)] == ["permission_grant"]
    assert any("not stored" in record.getMessage() for record in caplog.records)


async def test_retention_deletes_expired_rows_only(database: Database, writer: StoreWriter) -> None:
    now = [NOW]
    recorder = AuditRecorder(writer, clock=lambda: now[0])
    recorder.record(grant(actor_id="old"))
    await recorder.flush()  # the row is made, and stamped, on the writer thread
    now[0] = NOW + 30 * DAY
    recorder.record(grant(actor_id="newer"))
    await recorder.flush()
    now[0] = NOW + RETENTION_SECONDS + 1
    assert await recorder.purge_expired() == 1
    assert [row["actor_id"] for row in stored(database.path)] == ["newer"]


async def test_the_retention_job_runs_at_its_interval(
    database: Database, writer: StoreWriter
) -> None:
    now = [NOW]
    recorder = AuditRecorder(writer, clock=lambda: now[0])
    job = asyncio.create_task(recorder.run_retention(interval=0.01))
    try:
        recorder.record(grant())
        await recorder.flush()
        assert len(stored(database.path)) == 1
        now[0] = NOW + RETENTION_SECONDS + 1  # expired: one of the next passes deletes it
        async with asyncio.timeout(20):  # guards against a hang; measures nothing
            while stored(database.path):  # noqa: ASYNC110 - a table, not an event
                await asyncio.sleep(0.01)
    finally:
        job.cancel()


# ---- STO-05 ----


def test_a_fresh_database_has_its_audit_log(database: Database) -> None:
    require_audit_log(database)


def test_a_dropped_audit_log_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    open_database(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE audit_log")
    conn.close()
    database = open_database(path)  # the migrations do not bring it back
    with pytest.raises(AuditLogMissing) as refused:
        require_audit_log(database)
    message = str(refused.value)
    assert str(path) in message
    assert "no audit_log table" in message
    assert "backup" in message


def test_an_audit_log_missing_columns_is_refused_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    open_database(path)
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE audit_log; CREATE TABLE audit_log (id INTEGER PRIMARY KEY, event_id TEXT, "
        "event_type TEXT, created_at REAL, expires_at REAL);"
    )
    conn.close()
    with pytest.raises(AuditLogMissing, match="without the columns actor_id, actor_type"):
        require_audit_log(open_database(path))
