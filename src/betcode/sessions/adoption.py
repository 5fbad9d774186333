"""Adopting a conversation started with plain `claude` (or an IDE): claude keeps each one as a
transcript, `<claude dir>/projects/<directory, "/" and the like as "-">/<session id>.jsonl`.
Adopting makes a BetCode session whose claude resumes it (`--resume`, under a holder like any
other) and stores its earlier messages, so every client, export and search shows them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from betcode.sessions import event_builders as build
from betcode.sessions.manager import SessionManager
from betcode.sessions.session import HistoryLine, Session

TRANSCRIPT_SUFFIX = ".jsonl"
PREVIEW_CHARS = 80
# Lines claude writes into the user's turn that the user did not type.
NOT_TYPED = ("<command-", "<local-command-", "<system-reminder>")


class ConversationNotFound(LookupError):
    def __init__(self, claude_session_id: str, directory: str) -> None:
        super().__init__(
            f"claude has no conversation {claude_session_id!r} for {directory}; "
            "`betcode sessions adopt` lists the ones it has"
        )


class AlreadyAdopted(ValueError):
    def __init__(self, claude_session_id: str, session_id: str) -> None:
        super().__init__(
            f"claude's conversation {claude_session_id} is BetCode session {session_id} already"
        )
        self.session_id = session_id


@dataclass(frozen=True, slots=True)
class ClaudeConversation:
    claude_session_id: str
    path: Path
    modified: float
    messages: int  # user and assistant lines
    first_prompt: str


def project_dirs(claude_dir: Path, directory: str) -> list[Path]:
    """Where claude keeps `directory`'s transcripts (the spellings of its folder name)."""
    names = {directory.replace("/", "-"), re.sub(r"[^A-Za-z0-9-]", "-", directory)}
    return [claude_dir / "projects" / name for name in sorted(names)]


def conversations(claude_dir: Path, directory: str) -> list[ClaudeConversation]:
    """claude's conversations in `directory`, the latest first."""
    found: dict[str, ClaudeConversation] = {}
    for folder in project_dirs(claude_dir, directory):
        for path in folder.glob(f"*{TRANSCRIPT_SUFFIX}"):
            found[path.stem] = _summary(path)
    return sorted(found.values(), key=lambda c: c.modified, reverse=True)


def find_conversation(claude_dir: Path, directory: str, claude_session_id: str) -> Path:
    if re.fullmatch(r"[0-9A-Za-z-]+", claude_session_id):  # never a path of its own
        for folder in project_dirs(claude_dir, directory):
            path = folder / f"{claude_session_id}{TRANSCRIPT_SUFFIX}"
            if path.is_file():
                return path
    raise ConversationNotFound(claude_session_id, directory)


def history(path: Path) -> list[HistoryLine]:
    """The transcript's user and assistant lines, each with the events it reads as."""
    lines: list[HistoryLine] = []
    for raw, entry in _entries(path):
        kind = entry.get("type")
        content = (entry.get("message") or {}).get("content")
        if kind == "user" and not entry.get("isMeta"):
            events = _user_events(content)
            if events:
                lines.append(("in", "user", raw, events))
        elif kind == "assistant":
            events = _assistant_events(content)
            if events:
                lines.append(("out", "assistant", raw, events))
    return lines


async def adopt(
    sessions: SessionManager,
    claude_dir: Path,
    claude_session_id: str,
    directory: str,
    client_id: str | None = None,
) -> tuple[Session, int]:
    """A new session resuming claude's conversation, with its earlier messages stored (how
    many: the second value)."""
    path = find_conversation(claude_dir, directory, claude_session_id)
    page = await sessions.list()
    for record in page.sessions:
        if record.claude_session_id == claude_session_id:
            raise AlreadyAdopted(claude_session_id, record.id)
    session = await sessions.create(
        working_directory=directory,
        client_id=client_id,
        claude_session_id=claude_session_id,
        name=f"adopted {claude_session_id[:8]}",
    )
    earlier = history(path)
    session.import_history(earlier)
    return session, len(earlier)


def _summary(path: Path) -> ClaudeConversation:
    messages, first = 0, ""
    for _raw, entry in _entries(path):
        if entry.get("type") not in ("user", "assistant"):
            continue
        messages += 1
        if not first and entry.get("type") == "user" and not entry.get("isMeta"):
            first = " ".join(_typed_text(entry["message"].get("content")).split())
    return ClaudeConversation(
        path.stem, path, path.stat().st_mtime, messages, first[:PREVIEW_CHARS]
    )


def _entries(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    with path.open("rb") as transcript:
        for raw in transcript:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a line cut short (claude killed mid-write): the rest still reads
            if isinstance(entry, dict) and isinstance(entry.get("message"), dict):
                yield raw.rstrip(b"\n"), entry


def _typed_text(content: Any) -> str:
    if isinstance(content, str):
        return "" if content.startswith(NOT_TYPED) else content
    if isinstance(content, list):
        texts = [
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        ]
        return "\n".join(t for t in texts if isinstance(t, str) and not t.startswith(NOT_TYPED))
    return ""


def _user_events(content: Any) -> list[Any]:
    events = []
    typed = _typed_text(content)
    if typed:
        events.append(build.user_input_event(typed))
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_result":
            events.append(
                build.tool_call_result_event(
                    str(block.get("tool_use_id", "")),
                    _result_text(block.get("content")),
                    is_error=bool(block.get("is_error")),
                    duration_ms=0,
                )
            )
    return events


def _assistant_events(content: Any) -> list[Any]:
    events = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            events.append(build.text_delta_event(str(block["text"]), is_complete=True))
        elif block.get("type") == "tool_use":
            tool_input = block.get("input")
            events.append(
                build.tool_call_start_event(
                    str(block.get("id", "")),
                    str(block.get("name", "")),
                    tool_input if isinstance(tool_input, dict) else {},
                )
            )
    return events


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b
        )
    return ""
