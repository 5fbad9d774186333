"""The tolerant reader: one NDJSON line → one canonical message, never an exception.

The rules (docs/PROTOCOL.md#tolerant-reading):
* unknown fields are ignored, missing optional fields defaulted, numbers given as strings accepted;
* a line of unknown `type` becomes `Unknown` (kept whole) and is logged; when the 10th such line
  arrives, one warning names the types seen;
* invalid JSON, invalid UTF-8 and JSON that is not an object are logged, counted and skipped;
* a known type with wrong-typed fields is read best-effort and counted as
  `parse_errors_tolerated`;
* a `system/init` without the Bash tool (every CLI BetCode was checked against announces it)
  marks the stream DEGRADED.

Speed: `stream_event` lines, the bulk of a partial-messages stream, are decoded by msgspec
straight into `StreamEvent` (strict=False also turns "12" into 12). Any line that path rejects
goes through a plain decode and the dict builders (builders.py), after the Dart SDK dialect
is normalised (dialects.py).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from betcode.observability.hooks import observer
from betcode.protocol.builders import BUILDERS, build_message
from betcode.protocol.dialects import to_stream_json
from betcode.protocol.fields import FieldReader
from betcode.protocol.framing import Line
from betcode.protocol.messages import Message, StreamEvent, SystemInit, Unknown

logger = logging.getLogger(__name__)

UNKNOWN_TYPES_WARNING_AT = 10
_DETAILED_LOG_LINES = 20  # per kind of problem; later ones are only counted (and logged at DEBUG)
_PREVIEW_BYTES = 160

_stream_event_decoder = msgspec.json.Decoder(StreamEvent, strict=False)
_any_decoder = msgspec.json.Decoder()


@dataclass(slots=True)
class ReaderStats:
    lines: int = 0
    invalid_json: int = 0
    invalid_utf8: int = 0
    not_object: int = 0  # valid JSON, but an array, string, number or null
    truncated: int = 0
    parse_errors_tolerated: int = 0
    unknown_types: Counter[str] = field(default_factory=Counter)

    @property
    def invalid(self) -> int:
        """Lines that gave no message."""
        return self.invalid_json + self.invalid_utf8 + self.not_object


class ProtocolReader:
    """Decodes the lines of one claude stdout stream; keeps its statistics and degradation."""

    def __init__(self) -> None:
        self.stats = ReaderStats()
        self.degraded = False
        self.degraded_reason: str | None = None
        self._unknown_warning_given = False
        self._logged = Counter[str]()

    def decode_line(self, line: Line) -> Message | None:
        """`decode` for a framed line; also counts truncated lines."""
        if line.truncated:
            self.stats.truncated += 1
            observer().parse_error("truncated")
        return self.decode(line.data)

    def decode(self, data: bytes) -> Message | None:
        """The canonical message in `data` (one line, no newline), or None if it has none."""
        self.stats.lines += 1
        try:
            return _stream_event_decoder.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass  # not a stream_event, or not in its usual shape: take the tolerant path
        try:
            raw = _any_decoder.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError) as error:
            self._skip_undecodable(data, error)
            return None
        if not isinstance(raw, dict):
            self.stats.not_object += 1
            self._log_skipped(
                "not_object", f"line is JSON {type(raw).__name__}, not an object", data
            )
            return None
        return self._build(raw)

    def _build(self, raw: dict[str, Any]) -> Message:
        problems: list[str] = []
        try:
            normalised, dialect = to_stream_json(raw)
            message = build_message(FieldReader(normalised, problems=problems), dialect)
        except Exception:  # a builder bug must not stop the stream; the line is kept whole
            logger.exception("reading a %r line failed; it is kept as Unknown", raw.get("type"))
            self.stats.parse_errors_tolerated += 1
            observer().parse_error("tolerated")
            return Unknown(str(raw.get("type", "")), raw)
        if problems:
            self.stats.parse_errors_tolerated += 1
            observer().parse_error("tolerated")
            self._log_problem(message, problems)
        if isinstance(message, Unknown) and message.type not in BUILDERS:
            self._record_unknown(message.type)
        elif isinstance(message, SystemInit):
            self._check_features(message)
        return message

    def _skip_undecodable(self, data: bytes, error: Exception) -> None:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            self.stats.invalid_utf8 += 1
            reason = f"line is not valid UTF-8 ({utf8_error.reason} at byte {utf8_error.start})"
            self._log_skipped("invalid_utf8", reason, data)
            return
        self.stats.invalid_json += 1
        self._log_skipped("invalid_json", f"line is not valid JSON ({error})", data)

    def _record_unknown(self, type_name: str) -> None:
        counts = self.stats.unknown_types
        if type_name not in counts:
            logger.info("unknown NDJSON message type %r kept as Unknown", type_name)
        counts[type_name] += 1
        if not self._unknown_warning_given and counts.total() >= UNKNOWN_TYPES_WARNING_AT:
            self._unknown_warning_given = True
            seen = ", ".join(
                f"{name or '(no type)'} ×{count}" for name, count in counts.most_common()
            )
            logger.warning(
                "%d lines of unknown message types so far: %s. Claude Code may have been "
                "updated beyond what this BetCode knows; consider upgrading BetCode.",
                counts.total(),
                seen,
            )

    def _check_features(self, init: SystemInit) -> None:
        if "Bash" in init.tools:
            self.degraded, self.degraded_reason = False, None
            return
        reason = "system/init lacks the Bash tool"
        if reason != self.degraded_reason:
            logger.warning("stream DEGRADED: %s", reason)
        self.degraded, self.degraded_reason = True, reason

    def _log_skipped(self, kind: str, what: str, data: bytes) -> None:
        observer().parse_error(kind)
        if self._take_log_slot(kind):
            preview = data[:_PREVIEW_BYTES].decode("utf-8", "replace")
            logger.warning(
                "skipped a line: %s",
                what,
                extra={"error_type": kind, "raw_line_preview": preview},
            )

    def _log_problem(self, message: Message, problems: list[str]) -> None:
        if self._take_log_slot("tolerated"):
            logger.warning(
                "read a %s line best-effort: %s", type(message).__name__, "; ".join(problems[:5])
            )

    def _take_log_slot(self, kind: str) -> bool:
        """True while `kind` is under its detailed-log budget; says once when it runs out."""
        self._logged[kind] += 1
        if self._logged[kind] <= _DETAILED_LOG_LINES:
            return True
        if self._logged[kind] == _DETAILED_LOG_LINES + 1:
            logger.warning("more lines with %s follow; they are counted, not logged", kind)
        return False
