"""Text with secrets cut out: tool-input previews and error texts for the audit log, log records
(observability/logs.py) and notifications.

`redact` replaces what looks like a credential with `[REDACTED]`, erring on the side of cutting
too much: private-key blocks; tokens with a known prefix (Anthropic/OpenAI `sk-`, GitHub
`ghp_`/`github_pat_`, GitLab `glpat-`, Slack `xox?-`, AWS `AKIA`/`ASIA`, Google `AIza`, JWTs);
Authorization headers and Bearer tokens; passwords in URLs; the value of any assignment, JSON
member or command-line flag whose name mentions a secret, token, password, API key,
credential or auth; and any long run of letters and digits (32+), which is how random keys
look. The preview keeps what identifies a call (its command, path, URL or pattern), never more
than 256 characters of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"
PREVIEW_CHARS = 256
ELLIPSIS = "…"
# Only the start of a long input is looked at: redaction runs over more than the preview
# keeps, so a secret cut by the preview's end is still recognised whole.
SCAN_CHARS = 4096
# The input member that says what a call does, by tool: Bash, Read/Edit/Write, NotebookEdit,
# Glob/Grep, WebFetch, WebSearch, Task. Without one, the whole input (as JSON) is previewed.
SUBJECT_KEYS = ("command", "file_path", "notebook_path", "path", "url", "pattern", "query")

# Each pattern that starts with a repeated class is anchored at the start of a run of that
# class (a lookbehind): tried at every position inside a long word, it would cost O(n²).
_SECRET_NAME = (
    r"[\w.-]*(?:secret|token|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credential|auth)[\w.-]*"
)
# A value: quoted (up to its closing quote, spaces and all) or a bare word.
_VALUE = r"(?:\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|[^\s\"'&;,]+)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN[A-Z ]*PRIVATE KEY-----.*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)", re.S
        ),
        REDACTED,
    ),
    (
        re.compile(
            r"\b(?:sk-[\w-]{8,}|gh[pousr]_\w{16,}|github_pat_\w{16,}|glpat-[\w-]{16,}"
            r"|xox[abposr]-[\w-]{8,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[\w-]{30,}"
            r"|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*)"
        ),
        REDACTED,
    ),
    (re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)[^\n\"']+"), rf"\1{REDACTED}"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[\w.~+/=-]{8,}"), rf"\1 {REDACTED}"),
    (
        re.compile(r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"),
        rf"\1{REDACTED}@",
    ),
    (
        re.compile(rf"(?i)((?<![\w.-]){_SECRET_NAME}[\"']?\s*[:=]\s*){_VALUE}"),
        rf"\1{REDACTED}",
    ),
    (re.compile(rf"(?i)((?<![\w-])--?{_SECRET_NAME}\s+)(?!-){_VALUE}"), rf"\1{REDACTED}"),
    (re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z]*[0-9])(?=[0-9]*[A-Za-z])[A-Za-z0-9]{32,}"), REDACTED),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def redact(text: str) -> str:
    """`text` with everything that looks like a secret replaced by `[REDACTED]`."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def preview_of(tool_input: Mapping[str, Any]) -> str:
    """A one-line, redacted preview of a tool input, at most PREVIEW_CHARS characters."""
    subject = next(
        (value for key in SUBJECT_KEYS if isinstance(value := tool_input.get(key), str)), None
    )
    if subject is None:
        subject = json.dumps(
            tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )
    text = redact(subject[:SCAN_CHARS])
    text = _CONTROL.sub(" ", text)
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + ELLIPSIS


def cap_utf8(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 (never inside a character), marked with …."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(ELLIPSIS.encode())
    return data[:room].decode(errors="ignore") + ELLIPSIS
