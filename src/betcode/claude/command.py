"""The claude command line: exactly the invocation verified against the real CLI
(docs/PROTOCOL.md#starting-claude).

No positional prompt (with --input-format stream-json it is ignored; prompts go to stdin) and no
--cwd (it does not exist; the working directory is set on the process).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from betcode.claude.locate import ClaudeBinary

BASE_FLAGS = (
    "-p",
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
    # Without --verbose the CLI exits 1 before printing anything in stream-json mode.
    "--verbose",
    # Without it, anything that would prompt is denied automatically: no can_use_tool at all.
    "--permission-prompt-tool",
    "stdio",
)
PARTIAL_MESSAGES_FLAG = "--include-partial-messages"
PERMISSION_MODES = frozenset(
    {"default", "acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan"}
)


class InvalidClaudeOption(ValueError):
    """An option that would make claude fail or misbehave, refused before spawning."""


@dataclass(frozen=True)
class CommandOptions:
    """What varies between sessions' invocations (the resume id comes from the session)."""

    model: str | None = None
    allowed_tools: Sequence[str] = ()
    permission_mode: str | None = None
    include_partial_messages: bool = True
    extra_args: Sequence[str] = field(default_factory=tuple)
    # A subagent's limits: model calls per turn, and the only tools it has (claude's --tools).
    max_turns: int | None = None
    tools: Sequence[str] = ()


def _check_session_id(claude_session_id: str, use: str) -> None:
    # The CLI takes a non-UUID --resume value as a session *title* to search for, which would
    # silently resume the wrong conversation or fail with a confusing error; it refuses a
    # non-UUID --session-id.
    try:
        uuid.UUID(claude_session_id)
    except ValueError:
        raise InvalidClaudeOption(
            f"cannot {use} claude session {claude_session_id!r}: not a UUID session id"
        ) from None


def _tools_argument(allowed_tools: Sequence[str]) -> str:
    for tool in allowed_tools:
        if not tool.strip():
            raise InvalidClaudeOption("an empty tool name in allowed_tools")
    return ",".join(allowed_tools)


def build_argv(
    binary: ClaudeBinary | Path | str,
    *,
    resume_session_id: str | None = None,
    new_session_id: str | None = None,
    model: str | None = None,
    allowed_tools: Sequence[str] = (),
    permission_mode: str | None = None,
    include_partial_messages: bool = True,
    extra_args: Sequence[str] = (),
    max_turns: int | None = None,
    tools: Sequence[str] = (),
) -> list[str]:
    """argv for one claude process; raises InvalidClaudeOption for values claude would reject.
    `resume_session_id` continues that conversation; `new_session_id` starts a new one under
    that id (claude refuses an id it has a conversation of)."""
    path = binary.path if isinstance(binary, ClaudeBinary) else Path(binary)
    argv = [str(path), *BASE_FLAGS]
    if include_partial_messages:
        argv.append(PARTIAL_MESSAGES_FLAG)
    if resume_session_id is not None and new_session_id is not None:
        # Together they would fork the conversation (claude wants --fork-session then).
        raise InvalidClaudeOption("a claude process either resumes a session or starts one")
    if resume_session_id is not None:
        _check_session_id(resume_session_id, "resume")
        argv += ["--resume", resume_session_id]
    if new_session_id is not None:
        _check_session_id(new_session_id, "start")
        argv += ["--session-id", new_session_id]
    if model is not None:
        if not model.strip():
            raise InvalidClaudeOption("the model name is empty")
        argv += ["--model", model]
    if allowed_tools:
        argv += ["--allowedTools", _tools_argument(allowed_tools)]
    if permission_mode is not None:
        if permission_mode not in PERMISSION_MODES:
            raise InvalidClaudeOption(
                f"unknown permission mode {permission_mode!r}; "
                f"choose one of {', '.join(sorted(PERMISSION_MODES))}"
            )
        argv += ["--permission-mode", permission_mode]
    if max_turns is not None:
        if max_turns < 1:
            raise InvalidClaudeOption(f"max_turns must be at least 1, got {max_turns}")
        argv += ["--max-turns", str(max_turns)]
    if tools:
        argv += ["--tools", _tools_argument(tools)]
    argv += extra_args
    return argv


def build_argv_from(
    binary: ClaudeBinary | Path | str,
    options: CommandOptions,
    resume_session_id: str | None,
    *,
    new_session_id: str | None = None,
) -> list[str]:
    """build_argv with a session's stored options."""
    return build_argv(
        binary,
        resume_session_id=resume_session_id,
        new_session_id=new_session_id,
        model=options.model,
        allowed_tools=options.allowed_tools,
        permission_mode=options.permission_mode,
        include_partial_messages=options.include_partial_messages,
        extra_args=options.extra_args,
        max_turns=options.max_turns,
        tools=options.tools,
    )
