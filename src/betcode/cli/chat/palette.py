"""The palette's rules, without Textual: what is being completed at the cursor, the suggestions
for it, and which submitted `/commands` the chat runs itself.

`/` at the start of the input completes a command (name, then a space). `@` at the start of a
word completes a path below the session's directory (a folder keeps completing, a file ends
with a space) or an agent (`@agent-NAME`, as Claude Code mentions one). A submitted `/word`
the chat does not run itself goes to claude as text, as in Claude Code: claude runs its own and
custom commands, and reads anything else as a prompt.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from betcode.commands.registry import BUILTINS
from betcode.v1 import commands_pb2

MAX_SUGGESTIONS = 12
# Commands the chat runs itself: BetCode's built-ins (EXECUTION_MODE_LOCAL); those other than
# these three go to the daemon's ExecuteServiceCommand.
CLEAR, COMPACT, MODEL = "clear", "compact", "model"
LOCAL_COMMANDS = frozenset(spec.name for spec in BUILTINS)


class Completing(enum.Enum):
    COMMAND = "command"
    PATH = "path"


@dataclass(frozen=True, slots=True)
class Token:
    """The text being completed: `text[start:end]`, `end` being the cursor."""

    kind: Completing
    query: str  # without the leading / or @
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Suggestion:
    label: str  # what the list shows first: "/compact", "@src/app/"
    description: str
    insert: str  # what replaces the token when accepted


def offset_of(text: str, location: tuple[int, int]) -> int:
    """A (row, column) position in the input as an offset into its text."""
    row, column = location
    return sum(len(line) + 1 for line in text.split("\n")[:row]) + column


def location_of(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n"), offset - (before.rfind("\n") + 1)


def token_at(text: str, cursor: int) -> Token | None:
    before = text[:cursor]
    if before.startswith("/") and not any(ch.isspace() for ch in before):
        return Token(Completing.COMMAND, before[1:], 0, cursor)
    word_start = max(before.rfind(" "), before.rfind("\n"), before.rfind("\t")) + 1
    if before[word_start:].startswith("@"):
        return Token(Completing.PATH, before[word_start + 1 :], word_start, cursor)
    return None


def _describe(entry: commands_pb2.CommandEntry) -> str:
    hint = f"{entry.args_schema}  " if entry.HasField("args_schema") else ""
    origin = "" if entry.source in ("betcode", "claude-code") else f"  ({entry.source})"
    return f"{hint}{entry.description}{origin}".strip()


def command_suggestions(
    entries: Sequence[commands_pb2.CommandEntry], query: str, limit: int = MAX_SUGGESTIONS
) -> list[Suggestion]:
    """Names starting with the query first (in registry order), then names containing it."""
    wanted = query.lower()
    starts = [e for e in entries if e.name.lower().startswith(wanted)]
    contains = [e for e in entries if wanted in e.name.lower() and e not in starts]
    return [
        Suggestion(f"/{entry.name}", _describe(entry), f"/{entry.name} ")
        for entry in [*starts, *contains][:limit]
    ]


def agent_query(path_query: str) -> str | None:
    """What to ask ListAgents for while `@` completes: the query without Claude Code's
    `agent-` prefix; None inside a folder (`@src/…` names a path, not an agent)."""
    if "/" in path_query:
        return None
    return path_query.removeprefix("agent-")


def agent_suggestions(agents: Iterable[commands_pb2.AgentInfo]) -> list[Suggestion]:
    """`@agent-NAME`, the mention Claude Code inserts for an agent."""
    return [
        Suggestion(f"@agent-{agent.name}", f"agent ({agent.source})", f"@agent-{agent.name} ")
        for agent in agents
    ]


def path_suggestions(entries: Iterable[commands_pb2.PathEntry]) -> list[Suggestion]:
    found: list[Suggestion] = []
    for entry in entries:
        if entry.kind == commands_pb2.PATH_KIND_DIRECTORY:
            found.append(Suggestion(f"@{entry.path}/", "folder", f"@{entry.path}/"))
        else:
            kind = "symlink" if entry.kind == commands_pb2.PATH_KIND_SYMLINK else "file"
            found.append(Suggestion(f"@{entry.path}", kind, f"@{entry.path} "))
    return found


@dataclass(frozen=True, slots=True)
class ChatCommand:
    name: str
    argument: str


def chat_command(text: str) -> ChatCommand | None:
    """The command the chat runs itself for a submitted text, or None (send it to claude)."""
    words = text[1:].split(maxsplit=1) if text.startswith("/") else []
    if not words or words[0] not in LOCAL_COMMANDS:
        return None
    return ChatCommand(words[0], words[1].strip() if len(words) > 1 else "")
