"""What the palette offers: command and agent entries, BetCode's built-ins, and how the sources
merge into one list (pure; catalog.py reads the files and claude's reports).

Sources, in the order a same-named command wins: BetCode's built-ins (the chat runs them
itself, or the daemon does through ExecuteServiceCommand), the project's `.claude/commands`, the
user's, then claude's own slash commands as its `system/init` reported them (names only; a
few well-known ones get a description here).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class Category(enum.StrEnum):
    SERVICE = "service"  # BetCode's own
    CLAUDE_CODE = "claude_code"  # claude runs it: built into claude, or a custom command


class Mode(enum.StrEnum):
    LOCAL = "local"  # the client or the daemon runs it
    PASSTHROUGH = "passthrough"  # sent to claude as the message text


class Source(enum.StrEnum):
    BETCODE = "betcode"
    PROJECT = "project"
    USER = "user"
    CLAUDE = "claude-code"


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str  # without the leading "/"
    description: str
    category: Category
    mode: Mode
    source: Source
    args_hint: str | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    description: str
    source: Source


def _builtin(name: str, description: str, args_hint: str | None = None) -> CommandSpec:
    return CommandSpec(name, description, Category.SERVICE, Mode.LOCAL, Source.BETCODE, args_hint)


# The chat runs the first three; the daemon runs the service commands (ExecuteServiceCommand).
CHAT_COMMANDS = (
    _builtin("clear", "Start a fresh session in the same directory"),
    _builtin("compact", "Compact the conversation (claude summarises it) to free context"),
    _builtin("model", "Switch the session's model", "NAME"),
)
SERVICE_COMMANDS = (
    _builtin("pwd", "Show the session's working directory"),
    _builtin("reload-remote", "Re-read custom commands, agents and the path index"),
)
BUILTINS = (*CHAT_COMMANDS, *SERVICE_COMMANDS)

# claude's system/init lists its commands by name only.
CLAUDE_DESCRIPTIONS = {
    "context": "Show what fills claude's context window",
    "cost": "Show the session's token usage and cost",
    "init": "Write a CLAUDE.md describing this project",
    "review": "Review a pull request",
    "security-review": "Review the pending changes for security issues",
    "pr-comments": "Fetch the comments of a GitHub pull request",
    "release-notes": "Show Claude Code's release notes",
    "todos": "List the current todo items",
}


def claude_commands(names: Iterable[str]) -> list[CommandSpec]:
    return [
        CommandSpec(
            name,
            CLAUDE_DESCRIPTIONS.get(name, ""),
            Category.CLAUDE_CODE,
            Mode.PASSTHROUGH,
            Source.CLAUDE,
        )
        for name in names
        if name
    ]


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def merge(*sources: Sequence[N]) -> list[N]:
    """One entry per name, the first source's winning; each source's entries sorted by name."""
    seen: set[str] = set()
    merged: list[N] = []
    for source in sources:
        for entry in sorted(source, key=lambda entry: entry.name):
            if entry.name not in seen:
                seen.add(entry.name)
                merged.append(entry)
    return merged


def filter_agents(agents: Sequence[AgentSpec], query: str, limit: int) -> list[AgentSpec]:
    """Names starting with the query first, then names containing it (case-insensitive)."""
    wanted = query.lower()
    starts = [agent for agent in agents if agent.name.lower().startswith(wanted)]
    contains = [
        agent
        for agent in agents
        if wanted in agent.name.lower() and not agent.name.lower().startswith(wanted)
    ]
    return [*starts, *contains][:limit]
