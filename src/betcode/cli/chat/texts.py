"""One-line texts: a tool call's summary and the status bar."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from betcode.cli.chat.state import LOCK_REQUEST_KEY, Activity, Status

SUMMARY_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description")
SUMMARY_CHARS = 80
PREVIEW_LINES = 3  # lines of a tool's result shown under its collapsed title
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # turns while claude works, so a long think does not look like a hang
SPINNING = frozenset({Activity.THINKING, Activity.RUNNING_TOOL, Activity.COMPACTING})


def tool_summary(name: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool call does: its most telling input (the command, the path,
    the questions asked…) or, failing that, its input as compact JSON, cut to fit a line."""
    telling = [v for k in SUMMARY_KEYS if isinstance(v := tool_input.get(k), str) and v]
    text = telling[0] if telling else _questions_summary(tool_input.get("questions"))
    if not text and tool_input:
        text = json.dumps(tool_input, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _questions_summary(questions: Any) -> str:
    """AskUserQuestion's input: its question texts, not its JSON."""
    if not isinstance(questions, list):
        return ""
    texts = [q.get("question") for q in questions if isinstance(q, dict)]
    return " · ".join(text for text in texts if isinstance(text, str) and text)


def result_preview(output: str) -> str:
    """A finished tool's result at a glance: its first lines under a ⎿, and how many more."""
    lines = output.rstrip().splitlines() or ["(no output)"]
    preview = "⎿ " + "\n  ".join(lines[:PREVIEW_LINES])
    if len(lines) > PREVIEW_LINES:
        preview += f"\n  … +{len(lines) - PREVIEW_LINES} lines"
    return preview


def status_line(status: Status, spinner: str = "") -> str:
    """The status bar's text; ``spinner`` (a frame of SPINNER) goes before the activity."""
    parts = [f"session {status.session_id[:12]}" if status.session_id else "new session"]
    if status.model:
        parts.append(status.model)
    if status.branch:
        parts.append(f"branch {status.branch}")
    activity = str(status.activity)
    if status.activity is Activity.RUNNING_TOOL and status.current_tool:
        activity = f"running {status.current_tool}"
    parts.append(f"{spinner} {activity}" if spinner else activity)
    tokens = status.input_tokens + status.output_tokens
    parts.append(f"{tokens:,} tokens · ${status.cost_usd:.4f}")
    if status.you_hold_lock:
        parts.append("input lock: you")
    if status.read_only:
        parts.append(
            f"read-only: {status.lock_holder} has the input lock; "
            f"press {LOCK_REQUEST_KEY} to request it"
        )
    if status.connection:
        parts.append(status.connection)
    return "  │  ".join(parts)


def expiry_text(expires_at: datetime, now: datetime) -> str:
    """When an unanswered request expires, for people: the UTC time and how far off it is.
    ``expires_at`` from protobuf is naive UTC; ``now`` is aware."""
    expires_at = expires_at.replace(tzinfo=UTC) if expires_at.tzinfo is None else expires_at
    left = max(0, int((expires_at - now).total_seconds()))
    days, rest = divmod(left, 86_400)
    hours, rest = divmod(rest, 3_600)
    if days:
        span = f"{days} d {hours} h" if hours else f"{days} d"
    elif hours:
        span = f"{hours} h {rest // 60} min"
    else:
        span = f"{rest // 60} min {rest % 60} s"
    return f"{expires_at:%Y-%m-%d %H:%M} UTC (in {span}), then it is denied"
