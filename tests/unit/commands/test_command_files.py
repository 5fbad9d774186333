"""Custom command and agent files: frontmatter fields, descriptions, names, and the merge."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from betcode.commands.markdown import MAX_DESCRIPTION_CHARS, command_name, parse_markdown
from betcode.commands.registry import (
    BUILTINS,
    AgentSpec,
    Source,
    claude_commands,
    filter_agents,
    merge,
)


@pytest.mark.parametrize(
    ("text", "fields", "description"),
    [
        ("Review the diff\n\nthen more", {}, "Review the diff"),
        ("# Deploy it\nsteps", {}, "Deploy it"),
        (
            '---\ndescription: "Open a PR"\nargument-hint: [branch]\n---\nbody',
            {"description": "Open a PR", "argument-hint": "[branch]"},
            "Open a PR",
        ),
        (
            "---\nname: reviewer\ndescription: >\n  Reviews code\n  carefully\ntools: Read\n---\n",
            {"name": "reviewer", "description": "Reviews code carefully", "tools": "Read"},
            "Reviews code carefully",
        ),
        ("---\nallowed-tools: Bash(git:*)\n---\n\n## Heading line\n", None, "Heading line"),
        ("---\nnot closed\ndescription: x\n", {}, "---"),
        ("", {}, ""),
    ],
)
def test_frontmatter_and_description(
    text: str, fields: dict[str, str] | None, description: str
) -> None:
    parsed = parse_markdown(text)
    if fields is not None:
        assert parsed.fields == fields
    assert parsed.description() == description


def test_a_long_description_is_cut() -> None:
    parsed = parse_markdown("x" * 1000)
    assert len(parsed.description()) == MAX_DESCRIPTION_CHARS
    assert parsed.description().endswith("…")


@pytest.mark.parametrize(
    ("relative", "name"),
    [
        ("review.md", "review"),
        ("frontend/component.md", "frontend:component"),
        ("a/b/c.md", "a:b:c"),
    ],
)
def test_command_names_follow_claude_namespacing(relative: str, name: str) -> None:
    assert command_name(PurePosixPath(relative)) == name


def test_merge_keeps_the_first_source_per_name() -> None:
    claude = claude_commands(["compact", "context", "review-pr", ""])
    merged = merge(BUILTINS, claude)
    names = [spec.name for spec in merged]
    assert names.count("compact") == 1
    assert next(spec for spec in merged if spec.name == "compact").source is Source.BETCODE
    assert names[-2:] == ["context", "review-pr"]  # each source sorted, in source order
    assert next(spec for spec in merged if spec.name == "context").description


def test_agents_filter_prefix_first_then_substring() -> None:
    agents = [
        AgentSpec(name, "", Source.CLAUDE) for name in ("Plan", "explorer", "Explore", "xplan")
    ]
    assert [a.name for a in filter_agents(agents, "pl", 10)] == [
        "Plan",
        "explorer",
        "Explore",
        "xplan",
    ]
    assert [a.name for a in filter_agents(agents, "lan", 10)] == ["Plan", "xplan"]
    assert [a.name for a in filter_agents(agents, "", 2)] == ["Plan", "explorer"]
