"""The daemon's log records: JSON members, text at a terminal, TRACE, and no secret in any."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from betcode.observability.logs import (
    TRACE,
    choose_format,
    configure_logging,
    log_fields,
    render_line,
)

KEY = "sk-ant-api03-PLANTEDkeyPLANTEDkey"
PLAIN_SECRET = "correct-horse-battery"  # no secret shape: only known because the env names it


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure_logging(
        TRACE, "json", environ={"ANTHROPIC_API_KEY": KEY, "MY_PASSWORD": PLAIN_SECRET}, stream=out
    )
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)


def records(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_records_carry_the_fields_and_the_bound_context(logged: io.StringIO) -> None:
    log = logging.getLogger("betcode.sessions.session")
    with log_fields(session_id="s-1", request_id="r-9"):
        log.warning("slow", extra={"duration_ms": 12.5, "error_type": "Timeout"})
    log.log(TRACE, "claude stdout: {}")
    first, second = records(logged)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(first["timestamp"]))
    assert first["level"] == "WARN"
    assert first["target"] == "betcode.sessions.session"
    assert first["message"] == "slow"
    assert (first["session_id"], first["request_id"]) == ("s-1", "r-9")
    assert (first["duration_ms"], first["error_type"]) == (12.5, "Timeout")
    assert second["level"] == "TRACE"
    assert "session_id" not in second  # the context ended with the block


def test_no_secret_reaches_a_record(logged: io.StringIO) -> None:
    log = logging.getLogger("betcode.test")
    log.info("env key %s and %s", KEY, PLAIN_SECRET)
    log.warning("bad line", extra={"raw_line_preview": f'{{"token": "{PLAIN_SECRET}"}}'})
    try:
        raise ValueError(f"Authorization: Bearer {KEY}")
    except ValueError:
        log.exception("failed")
    text = logged.getvalue()
    assert KEY not in text
    assert PLAIN_SECRET not in text
    assert text.count("[REDACTED]") >= 4
    assert records(logged)[2]["error_type"] == "ValueError"


def test_text_at_a_terminal_json_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert choose_format(None, Terminal()) == "text"
    assert choose_format(None, io.StringIO()) == "json"
    assert choose_format("json", Terminal()) == "json"


def test_text_format_is_one_readable_line() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    try:
        configure_logging(logging.INFO, "text", environ={}, stream=out)
        with log_fields(session_id="s-2"):
            logging.getLogger("betcode.daemon").info("serving")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    line = out.getvalue().strip()
    assert re.fullmatch(r"\S+Z INFO betcode.daemon: serving \[session_id=s-2\]", line), line


def test_daemon_logs_renders_json_records_as_text_and_leaves_other_lines() -> None:
    record = (
        '{"timestamp": "2026-01-02T03:04:05.678Z", "level": "WARN", "target": "betcode.x", '
        '"message": "slow", "session_id": "s-1"}'
    )
    assert render_line(record) == "2026-01-02T03:04:05.678Z WARN betcode.x: slow [session_id=s-1]"
    assert render_line("Traceback (most recent call last):") == "Traceback (most recent call last):"
    assert render_line("{not json") == "{not json"
    assert render_line('{"a": 1}') == '{"a": 1}'
