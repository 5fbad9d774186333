"""parse_rule: what each rule string becomes, why bad ones are refused, and that nothing else
escapes it whatever the input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.permissions.path_glob import Anchor, PathPattern
from betcode.permissions.rules import (
    BashPattern,
    DomainPattern,
    InvalidRule,
    RuleList,
    RuleSource,
    format_rule,
    parse_rule,
)

SOURCE = RuleSource("/p/.claude/settings.json", RuleList.ALLOW, "/p")
DENY_SOURCE = RuleSource("/p/.claude/settings.json", RuleList.DENY, "/p")


@pytest.mark.parametrize(
    ("text", "tool", "kind"),
    [
        ("Bash", "Bash", None),
        ("  Bash  ", "Bash", None),
        ("Bash()", "Bash", None),
        ("Bash(*)", "Bash", None),
        ("Bash(:*)", "Bash", None),
        ("Bash(npm test)", "Bash", BashPattern),
        ("Read(src/**)", "Read", PathPattern),
        ("Edit(//etc/x)", "Edit", PathPattern),
        ("WebFetch(domain:example.com)", "WebFetch", DomainPattern),
        ("mcp__github", "mcp__github", None),
        ("mcp__github__*", "mcp__github__*", None),
        ("mcp__my-server__do_thing", "mcp__my-server__do_thing", None),
        ("WebSearch", "WebSearch", None),
        ("Task()", "Task", None),
    ],
)
def test_valid_rules(text: str, tool: str, kind: type | None) -> None:
    rule = parse_rule(text, SOURCE)
    assert rule.tool_name == tool
    assert rule.text == text.strip()
    assert rule.source is SOURCE
    if kind is None:
        assert rule.pattern is None
    else:
        assert isinstance(rule.pattern, kind)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("Bash(npm test", "must end with `)`"),
        ("Bash(npm test) extra", "must end with `)`"),
        ("Bash)", "without a matching `(`"),
        ("(npm test)", "does not name a tool"),
        ("Bash (ls)", "not a tool name"),
        ("Ba*sh", "not a tool name"),
        ("*", "not a tool name"),
        ("mcp__a__b__*x", "not a tool name"),
        ("mcp__server(x)", "MCP rules take no specifier"),
        ("Grep(foo)", "only for Bash"),
        ("WebFetch(https://example.com)", "domain:"),
        ("WebFetch(domain:)", "not a host name"),
        ("WebFetch(domain:exa mple.com)", "not a host name"),
        ("Read([)", "not closed"),
        ("Read(src/[z-a].py)", "bad character class"),
        ("Read(~bob/x)", "only `~/`"),
        ("Read(a\\)", "lone backslash"),
        ("Bash(a\x00b)", "NUL"),
    ],
)
def test_invalid_rules_say_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidRule) as caught:
        parse_rule(text, SOURCE)
    assert reason in caught.value.reason
    assert caught.value.text == text
    assert caught.value.source is SOURCE
    assert SOURCE.origin in str(caught.value)


def test_literal_pattern_is_exact_for_allow_and_prefix_for_deny() -> None:
    allow = parse_rule("Bash(git push)", SOURCE).pattern
    deny = parse_rule("Bash(git push)", DENY_SOURCE).pattern
    assert isinstance(allow, BashPattern)
    assert isinstance(deny, BashPattern)
    assert allow.literal == deny.literal == "git push"
    assert allow.regex != deny.regex


@pytest.mark.parametrize(
    ("text", "anchor", "base"),
    [
        ("Read(//etc/**)", Anchor.ROOT, "/p"),
        ("Read(~/x)", Anchor.HOME, "/p"),
        ("Read(/docs/**)", Anchor.SETTINGS, "/p"),
        ("Read(./docs)", Anchor.CWD, "/p"),
        ("Read(docs)", Anchor.CWD, "/p"),
    ],
)
def test_path_anchors(text: str, anchor: Anchor, base: str) -> None:
    pattern = parse_rule(text, SOURCE).pattern
    assert isinstance(pattern, PathPattern)
    assert pattern.anchor is anchor
    assert pattern.base_dir == base


def test_claude_code_escaped_parentheses() -> None:
    # As the CLI writes an approved command into settings.local.json.
    rule = parse_rule("Bash(python3 -c \"print\\('hello'\\)\")", SOURCE)
    assert isinstance(rule.pattern, BashPattern)
    assert rule.pattern.literal == "python3 -c \"print('hello')\""


TOOLS = st.sampled_from(["Bash", "Read", "Edit", "Write", "WebFetch", "mcp__s", "Grep", ""])


@given(st.text())
def test_no_text_crashes_the_parser(text: str) -> None:
    with contextlib.suppress(InvalidRule):
        parse_rule(text, SOURCE)


@given(TOOLS, st.text(), st.sampled_from(list(RuleList)))
def test_no_specifier_crashes_the_parser(tool: str, content: str, list_name: RuleList) -> None:
    with contextlib.suppress(InvalidRule):
        parse_rule(f"{tool}({content})", RuleSource("cli", list_name))


@given(st.sampled_from(["Bash", "Read", "WebFetch"]), st.text(min_size=1))
def test_format_rule_round_trips_any_specifier(tool: str, content: str) -> None:
    try:
        rule = parse_rule(format_rule(tool, content), SOURCE)
    except InvalidRule:
        return
    assert rule.tool_name == tool
    assert rule.specifier == content
