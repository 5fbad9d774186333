"""The daemon's log records: one JSON object per line, or text for a person at a terminal.

Every record carries `timestamp` (ISO-8601 UTC, milliseconds), `level`, `target` (the logger,
i.e. the module path) and `message`; `session_id`, `request_id`, `trace_id`, `span_id` when
known (bound for a stretch of code with `log_fields`, or passed as `extra=`), and the
contextual `error_type`, `duration_ms`, `raw_line_preview`. Levels ERROR, WARN, INFO, DEBUG and
TRACE (raw NDJSON lines; below DEBUG, off unless `daemon.log_level` is `trace`).

No secret reaches a line: the message, the preview and any exception text go
through `observability.redaction.redact` (the audit log's redaction), and the values of the
daemon's own secret environment variables (API keys, tokens) are replaced wherever they appear.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO

from betcode.observability.redaction import REDACTED, redact

TRACE = 5
LOG_FORMATS = ("json", "text")
# The record attributes (set by `log_fields` or `extra=`) that become JSON members.
CONTEXT_FIELDS = ("session_id", "request_id", "trace_id", "span_id", "machine_id")
EXTRA_FIELDS = ("error_type", "duration_ms", "raw_line_preview")
_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "ERROR", "Level 5": "TRACE"}
_SECRET_ENV_NAME = re.compile(r"(?i)key|token|secret|passw|credential|auth")
_MIN_SECRET_CHARS = 8

_context: ContextVar[Mapping[str, str]] = ContextVar("betcode_log_context", default={})  # noqa: B039 - never mutated
# Set by tracing when it is on: the current span's (trace_id, span_id), or None.
TraceIds = Callable[[], tuple[str, str] | None]
_trace_ids: list[TraceIds] = []

logging.addLevelName(TRACE, "TRACE")


@contextlib.contextmanager
def log_fields(**fields: str) -> Iterator[None]:
    """Records logged inside the block (and in tasks it starts) carry `fields`."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_fields(**fields: str) -> None:
    """Like `log_fields`, for the rest of the current task (e.g. a session's consumer)."""
    _context.set({**_context.get(), **fields})


def current_log_fields() -> Mapping[str, str]:
    """The fields bound for the current task (`session_id`, ...)."""
    return _context.get()


def use_trace_ids(source: TraceIds | None) -> None:
    _trace_ids.clear()
    if source is not None:
        _trace_ids.append(source)


class Redactor:
    """Cuts secrets out of text: known secret values from the environment, then whatever
    looks like one (`redact`)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        values = {
            value
            for name, value in environ.items()
            if _SECRET_ENV_NAME.search(name) and len(value) >= _MIN_SECRET_CHARS
        }
        # Longest first, so a value containing another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return redact(text)


class _Formatter(logging.Formatter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redact = redactor

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        """The record's members, in order, secrets cut out."""
        out: dict[str, object] = {
            "timestamp": _timestamp(record.created),
            "level": _LEVEL_NAMES.get(record.levelname, record.levelname),
            "target": record.name,
            "message": self.redact(record.getMessage()),
        }
        context = _context.get()
        ids = _trace_ids[0]() if _trace_ids else None
        if ids is not None:
            context = {"trace_id": ids[0], "span_id": ids[1], **context}
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None) or context.get(name)
            if value:
                out[name] = str(value)
        for name in EXTRA_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = self.redact(value) if isinstance(value, str) else value
        if record.exc_info:
            out["error_type"] = out.get("error_type") or _error_type(record)
            out["exception"] = self.redact(self.formatException(record.exc_info))
        return out


class JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.fields(record), ensure_ascii=False, default=str)


class TextFormatter(_Formatter):
    """`2026-01-02T03:04:05.678Z INFO betcode.daemon: message [session_id=…]`."""

    def format(self, record: logging.LogRecord) -> str:
        return _as_text(self.fields(record))


def choose_format(requested: str | None, stream: IO[str]) -> str:
    """`requested` if given; else text on a terminal and JSON anywhere else (a log file)."""
    if requested:
        return requested
    return "text" if stream.isatty() else "json"


def configure_logging(
    level: int,
    log_format: str | None = None,
    *,
    environ: Mapping[str, str],
    stream: IO[str] | None = None,
) -> logging.Handler:
    """One handler on the root logger writing `log_format` records to `stream` (stderr)."""
    out = stream if stream is not None else sys.stderr
    redactor = Redactor(environ)
    chosen = choose_format(log_format, out)
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter(redactor) if chosen == "json" else TextFormatter(redactor))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def render_line(line: str) -> str:
    """A JSON log line as the text format shows it (`betcode daemon logs`); any other line
    (a text log, a crash's traceback) as it is."""
    if not line.startswith("{"):
        return line
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict) or not {"timestamp", "level", "message"} <= record.keys():
        return line
    return _as_text(record)


def _as_text(record: Mapping[str, object]) -> str:
    fields = dict(record)
    head = f"{fields.pop('timestamp')} {fields.pop('level')} {fields.pop('target', '?')}: "
    text = head + str(fields.pop("message"))
    exception = fields.pop("exception", None)
    if fields:
        text += " [" + " ".join(f"{k}={v}" for k, v in fields.items()) + "]"
    return text + (f"\n{exception}" if exception else "")


def _timestamp(created: float) -> str:
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _error_type(record: logging.LogRecord) -> str | None:
    exc_type = record.exc_info[0] if record.exc_info else None
    return exc_type.__name__ if exc_type is not None else None
