"""The palette's rules: the token at the cursor, suggestions, and which commands the chat runs."""

from __future__ import annotations

import pytest

from betcode.cli.chat.palette import (
    Completing,
    agent_query,
    agent_suggestions,
    chat_command,
    command_suggestions,
    location_of,
    offset_of,
    path_suggestions,
    token_at,
)
from betcode.v1 import commands_pb2 as pb


@pytest.mark.parametrize(
    ("text", "cursor", "expected"),
    [
        ("/", 1, (Completing.COMMAND, "", 0)),
        ("/com", 4, (Completing.COMMAND, "com", 0)),
        ("/compact now", 12, None),  # past the name: arguments are not completed
        ("say /com", 8, None),  # a command only at the start
        ("@", 1, (Completing.PATH, "", 0)),
        ("look at @src/ma", 15, (Completing.PATH, "src/ma", 8)),
        ("look at @src/ma and", 15, (Completing.PATH, "src/ma", 8)),  # cursor mid-text
        ("line\n@do", 8, (Completing.PATH, "do", 5)),
        ("mail me@host", 12, None),  # @ inside a word is not a mention
        ("", 0, None),
    ],
)
def test_token_at_the_cursor(
    text: str, cursor: int, expected: tuple[Completing, str, int] | None
) -> None:
    token = token_at(text, cursor)
    if expected is None:
        assert token is None
    else:
        assert token is not None
        assert (token.kind, token.query, token.start, token.end) == (*expected, cursor)


@pytest.mark.parametrize(
    ("text", "location", "offset"),
    [("abc", (0, 2), 2), ("ab\ncd", (1, 1), 4), ("ab\n\ncd", (2, 0), 4), ("", (0, 0), 0)],
)
def test_locations_and_offsets(text: str, location: tuple[int, int], offset: int) -> None:
    assert offset_of(text, location) == offset
    assert location_of(text, offset) == location


ENTRIES = [
    pb.CommandEntry(name="clear", description="Fresh session", source="betcode"),
    pb.CommandEntry(name="model", description="Switch", source="betcode", args_schema="NAME"),
    pb.CommandEntry(name="review-pr", description="Review", source="project"),
    pb.CommandEntry(name="pr-comments", description="", source="claude-code"),
]


def test_command_suggestions_prefix_first_then_contained() -> None:
    found = command_suggestions(ENTRIES, "PR")
    assert [s.label for s in found] == ["/pr-comments", "/review-pr"]
    assert found[1].description == "Review  (project)"
    assert found[1].insert == "/review-pr "
    model = command_suggestions(ENTRIES, "mo")[0]
    assert model.description == "NAME  Switch"
    assert len(command_suggestions(ENTRIES, "", limit=2)) == 2


def test_path_suggestions_keep_completing_folders() -> None:
    entries = [
        pb.PathEntry(path="src", kind=pb.PATH_KIND_DIRECTORY),
        pb.PathEntry(path="main.py", kind=pb.PATH_KIND_FILE),
        pb.PathEntry(path="link", kind=pb.PATH_KIND_SYMLINK),
    ]
    assert [(s.label, s.insert, s.description) for s in path_suggestions(entries)] == [
        ("@src/", "@src/", "folder"),
        ("@main.py", "@main.py ", "file"),
        ("@link", "@link ", "symlink"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/clear", ("clear", "")),
        ("/model  opus ", ("model", "opus")),
        ("/compact", ("compact", "")),
        ("/pwd", ("pwd", "")),
        ("/review-pr 12", None),  # claude's (custom) command: sent as text
        ("/frobnicate", None),  # unknown: sent as text, as Claude Code does
        ("/usr/bin/env is odd", None),
        ("hello /clear", None),
        ("/", None),
    ],
)
def test_which_commands_the_chat_runs(text: str, expected: tuple[str, str] | None) -> None:
    command = chat_command(text)
    assert (None if command is None else (command.name, command.argument)) == expected


@pytest.mark.parametrize(
    ("query", "wanted"), [("", ""), ("rev", "rev"), ("agent-rev", "rev"), ("src/rev", None)]
)
def test_agents_are_asked_for_unless_inside_a_folder(query: str, wanted: str | None) -> None:
    assert agent_query(query) == wanted


def test_agent_mentions() -> None:
    [mention] = agent_suggestions([pb.AgentInfo(name="code-reviewer", source="project")])
    assert (mention.label, mention.insert) == ("@agent-code-reviewer", "@agent-code-reviewer ")
    assert mention.description == "agent (project)"
