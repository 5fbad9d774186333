"""The claude command line: exactly docs/PROTOCOL.md#starting-claude's working invocation."""

from __future__ import annotations

from pathlib import Path

import pytest

from betcode.claude.command import CommandOptions, InvalidClaudeOption, build_argv, build_argv_from
from betcode.claude.locate import BinarySource, ClaudeBinary

BINARY = ClaudeBinary(Path("/opt/claude/bin/claude"), BinarySource.FLAG)
BASE = [
    "/opt/claude/bin/claude",
    "-p",
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
]
SESSION = "3fc6896c-2f41-4b8a-9d0e-8f1c2a3b4c5d"


@pytest.mark.parametrize(
    ("options", "tail"),
    [
        ({}, ["--include-partial-messages"]),
        ({"include_partial_messages": False}, []),
        (
            {"resume_session_id": SESSION},
            ["--include-partial-messages", "--resume", SESSION],
        ),
        (
            {"new_session_id": SESSION},
            ["--include-partial-messages", "--session-id", SESSION],
        ),
        ({"model": "sonnet"}, ["--include-partial-messages", "--model", "sonnet"]),
        (
            {"allowed_tools": ["Bash(python3:*)", "Write"]},
            ["--include-partial-messages", "--allowedTools", "Bash(python3:*),Write"],
        ),
        (
            {"permission_mode": "acceptEdits"},
            ["--include-partial-messages", "--permission-mode", "acceptEdits"],
        ),
        (
            {"extra_args": ["--max-turns", "3"]},
            ["--include-partial-messages", "--max-turns", "3"],
        ),
        (
            {"resume_session_id": SESSION, "model": "opus", "allowed_tools": ["Read"]},
            [
                "--include-partial-messages",
                "--resume",
                SESSION,
                "--model",
                "opus",
                "--allowedTools",
                "Read",
            ],
        ),
    ],
)
def test_argv_table(options: dict[str, object], tail: list[str]) -> None:
    assert build_argv(BINARY, **options) == BASE + tail  # type: ignore[arg-type]


def test_no_positional_prompt_and_no_cwd_flag() -> None:
    argv = build_argv(BINARY, resume_session_id=SESSION, model="m", allowed_tools=["Bash"])
    assert "--cwd" not in argv
    flags_with_values = {"--output-format", "--input-format", "--permission-prompt-tool"}
    flags_with_values |= {"--resume", "--model", "--allowedTools"}
    for index, word in enumerate(argv[1:], start=1):
        if not word.startswith("-"):
            assert argv[index - 1] in flags_with_values, f"positional argument {word!r}"


def test_plain_paths_work_as_binary() -> None:
    assert build_argv("/x/claude")[0] == "/x/claude"
    assert build_argv(Path("/x/claude"))[0] == "/x/claude"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resume_session_id": "my session title"}, "not a UUID"),
        ({"resume_session_id": ""}, "not a UUID"),
        ({"new_session_id": "my session title"}, "not a UUID"),
        ({"resume_session_id": SESSION, "new_session_id": SESSION}, "either resumes"),
        ({"model": "  "}, "model name is empty"),
        ({"allowed_tools": ["Bash", ""]}, "empty tool name"),
        ({"permission_mode": "yolo"}, "unknown permission mode 'yolo'"),
    ],
)
def test_options_claude_would_misread_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidClaudeOption, match=message):
        build_argv(BINARY, **options)  # type: ignore[arg-type]


def test_stored_options_build_the_same_argv() -> None:
    options = CommandOptions(model="opus", allowed_tools=("Read",), permission_mode="plan")
    assert build_argv_from(BINARY, options, SESSION) == build_argv(
        BINARY,
        resume_session_id=SESSION,
        model="opus",
        allowed_tools=("Read",),
        permission_mode="plan",
    )
