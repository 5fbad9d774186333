"""One-line texts: a tool call's summary and the status bar."""

from __future__ import annotations

import json
from typing import Any

from betcode.cli.chat.state import LOCK_REQUEST_KEY, Activity, Status

SUMMARY_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description")
SUMMARY_CHARS = 80


def tool_summary(name: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool call does: its most telling input (the command, the path…)
    or, failing that, its input as compact JSON, cut to fit a line."""
    for key in SUMMARY_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            text = value
            break
    else:
        text = json.dumps(tool_input, ensure_ascii=False, separators=(",", ":"))
        text = "" if text == "{}" else text
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def status_line(status: Status) -> str:
    """The status bar's text."""
    parts = [f"session {status.session_id[:12]}" if status.session_id else "new session"]
    if status.model:
        parts.append(status.model)
    activity = str(status.activity)
    if status.activity is Activity.RUNNING_TOOL and status.current_tool:
        activity = f"running {status.current_tool}"
    parts.append(activity)
    tokens = status.input_tokens + status.output_tokens
    parts.append(f"{tokens:,} tokens · ${status.cost_usd:.4f}")
    if status.read_only:
        parts.append(
            f"read-only: {status.lock_holder} has the input lock; "
            f"press {LOCK_REQUEST_KEY} to request it"
        )
    if status.connection:
        parts.append(status.connection)
    return "  │  ".join(parts)
