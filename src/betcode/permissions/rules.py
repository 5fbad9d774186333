"""Claude Code permission rules: parse `Tool` / `Tool(specifier)` strings into matchable rules.

Syntax (the full semantics, with examples, are in docs/PERMISSION_RULES.md):

* `Tool` (or `Tool()`): every call of that tool. `Bash(*)` and `Bash(:*)` mean `Bash`.
* `mcp__server` and `mcp__server__*`: every tool of that MCP server; `mcp__server__tool`:
  that one tool. MCP rules take no specifier. Other wildcards in tool names are invalid.
* `Bash(spec)`, matched against the `command` input, whitespace-normalised:
  - no `*`: the exact command (`Bash(npm test)`);
  - ends with `:*` or ` *`: that prefix on a word boundary, with or without more words
    (`Bash(npm run:*)` and `Bash(npm run *)` match `npm run`, `npm run build`, not `npm runx`);
  - other `*`: any run of characters (`Bash(git * main)`, `Bash(* --version)`);
  - `\\*` is a literal `*`, `\\\\` a literal backslash; every other character is literal.
* `Read(path)`, `Edit(path)`, `Write(path)`, `MultiEdit(path)`, `NotebookEdit(path)`:
  gitignore-style path patterns (see `path_glob`). A `Read` pattern also covers the other
  read-only file tools (Glob, Grep, NotebookRead, LS); an `Edit` pattern covers every
  file-editing tool (Write, MultiEdit, NotebookEdit).
* `WebFetch(domain:example.com)`: the `url` input's host, exactly; `domain:*.example.com`
  matches any subdomain (not example.com itself).
* Parentheses inside the specifier may be escaped as `\\(` / `\\)` (Claude Code writes them
  so); the specifier runs from the first `(` to the final `)`.

A rule with a specifier for any other tool is invalid: BetCode cannot tell what it would match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from betcode.permissions.path_glob import PathPattern, parse_path_pattern
from betcode.permissions.shell_split import normalize_whitespace


class RuleList(StrEnum):
    """The settings list a rule came from (`permissions.allow` / `.deny` / `.ask`)."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


@dataclass(frozen=True, slots=True)
class RuleSource:
    """Where a rule came from: a settings file path (or "cli" / "session"), its list, and the
    directory `/path` patterns are relative to (None: the session's working directory)."""

    origin: str
    list_name: RuleList
    base_dir: str | None = None


class InvalidRule(ValueError):
    """A rule string that cannot be used; it is reported and skipped."""

    def __init__(self, text: str, source: RuleSource, reason: str) -> None:
        super().__init__(f"{source.origin}: {source.list_name} rule {text!r} skipped: {reason}")
        self.text = text
        self.source = source
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BashPattern:
    """`literal` is the normalised command for a pattern without wildcards; `regex` is the
    source of a full-match regex over a normalised command (prefix form for deny/ask lists)."""

    literal: str | None
    regex: str


@dataclass(frozen=True, slots=True)
class DomainPattern:
    host: str
    subdomains: bool

    def matches(self, host: str) -> bool:
        if self.subdomains:
            return host.endswith("." + self.host)
        return host == self.host


Specifier = BashPattern | PathPattern | DomainPattern

# Rule tool -> the tools its path pattern applies to.
PATH_FAMILIES: dict[str, tuple[str, ...]] = {
    "Read": ("Read", "Glob", "Grep", "NotebookRead", "LS"),
    "Edit": ("Edit", "Write", "MultiEdit", "NotebookEdit"),
    "Write": ("Write",),
    "MultiEdit": ("MultiEdit",),
    "NotebookEdit": ("NotebookEdit",),
}

_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_MCP_NAME = re.compile(r"mcp__(?:[A-Za-z0-9.-]|_(?!_))+(?:__(?:\*|[A-Za-z0-9_.-]+))?")
_HOST = re.compile(r"[\w-]+(?:\.[\w-]+)*|[0-9a-f:]+")
# Prefix form: the words of the prefix, then optionally a blank and anything.
_WORD_TAIL = "(?: .*)?"


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    source: RuleSource
    tool_name: str
    specifier: str | None  # the text between the parentheses, unescaped
    pattern: Specifier | None  # None: every call of the tool (or MCP server)

    def describe(self) -> str:
        return f"{self.text} (from {self.source.origin})"

    @property
    def mcp_prefix(self) -> str | None:
        """For server-wide MCP rules, the prefix every tool of that server starts with."""
        name = self.tool_name
        if not name.startswith("mcp__"):
            return None
        if name.endswith("__*"):
            return name[:-1]
        return name + "__" if "__" not in name[5:] else None

    def applies_to(self, tool_name: str) -> bool:
        """Whether this rule can match calls of `tool_name` at all."""
        if isinstance(self.pattern, PathPattern):
            return tool_name in PATH_FAMILIES[self.tool_name]
        prefix = self.mcp_prefix
        if prefix is not None and tool_name.startswith(prefix):
            return True
        return tool_name == self.tool_name and not self.tool_name.endswith("*")


def parse_rule(text: str, source: RuleSource) -> Rule:
    """Parse one rule string; raises InvalidRule saying why it cannot be used."""
    stripped = text.strip()
    try:
        name, content = _split(stripped)
        _check_tool_name(name)
        pattern = _specifier(name, content, source)
    except ValueError as error:
        raise InvalidRule(text, source, str(error)) from None
    return Rule(stripped, source, name, content, pattern)


def format_rule(tool_name: str, content: str | None) -> str:
    """The rule text for a tool and specifier, escaping parentheses as Claude Code does."""
    if content is None:
        return tool_name
    escaped = content.replace("(", "\\(").replace(")", "\\)")
    return f"{tool_name}({escaped})"


def escape_bash_literal(command: str) -> str:
    """A Bash specifier that matches exactly `command` (no wildcards)."""
    return command.replace("\\", "\\\\").replace("*", "\\*")


def _split(text: str) -> tuple[str, str | None]:
    if not text:
        raise ValueError("the rule is empty")
    if "\x00" in text:
        raise ValueError("the rule contains a NUL character")
    open_at = text.find("(")
    if open_at < 0:
        if ")" in text:
            raise ValueError("`)` without a matching `(`")
        return text, None
    if not text.endswith(")"):
        raise ValueError("the specifier must end with `)`, with nothing after it")
    return text[:open_at], _unescape_parens(text[open_at + 1 : -1])


def _unescape_parens(content: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(content):
        if content[i] == "\\" and content[i + 1 : i + 2] in ("(", ")"):
            i += 1
        out.append(content[i])
        i += 1
    return "".join(out)


def _check_tool_name(name: str) -> None:
    if not name:
        raise ValueError("the rule does not name a tool")
    pattern = _MCP_NAME if name.startswith("mcp__") else _TOOL_NAME
    if not pattern.fullmatch(name):
        raise ValueError(
            f"`{name}` is not a tool name (letters, digits, `_`, `-`; "
            "a `*` only as in `mcp__server__*`)"
        )


def _specifier(name: str, content: str | None, source: RuleSource) -> Specifier | None:
    if content is None or not content.strip():
        return None
    if name == "Bash":
        return _bash_pattern(content, source.list_name)
    if name in PATH_FAMILIES:
        return parse_path_pattern(content, source.base_dir)
    if name == "WebFetch":
        return _domain_pattern(content)
    if name.startswith("mcp__"):
        raise ValueError(
            "MCP rules take no specifier: use mcp__server, mcp__server__tool or mcp__server__*"
        )
    raise ValueError(
        f"BetCode matches specifiers only for Bash, {', '.join(PATH_FAMILIES)} and WebFetch; "
        f"write `{name}` to cover every call of it"
    )


def _bash_pattern(content: str, list_name: RuleList) -> BashPattern | None:
    tokens = _bash_tokens(normalize_whitespace(content))
    prefix_form = len(tokens) >= 2 and tokens[-1] is None and tokens[-2] in (":", " ")
    if prefix_form:
        tokens = tokens[:-2]
        while tokens and tokens[-1] == " ":
            tokens.pop()
        if not tokens:
            return None  # `Bash(:*)`: every command
    if tokens == [None]:
        return None  # `Bash(*)`
    tail = _WORD_TAIL if prefix_form else ""
    if None in tokens:
        return BashPattern(None, _wildcard_regex(tokens) + tail)
    literal = "".join(t for t in tokens if t is not None)
    if prefix_form:
        return BashPattern(None, re.escape(literal) + tail)
    # Rules that stop or pause a call are conservative: a literal deny/ask rule also catches
    # the command with more words after it (`git push --force` catches `... origin main`).
    stops = list_name in (RuleList.DENY, RuleList.ASK)
    return BashPattern(literal, re.escape(literal) + (_WORD_TAIL if stops else ""))


def _bash_tokens(text: str) -> list[str | None]:
    """Characters of a Bash specifier, with None for each wildcard `*`."""
    tokens: list[str | None] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and text[i + 1 : i + 2] in ("*", "\\"):
            tokens.append(text[i + 1])
            i += 2
            continue
        tokens.append(None if c == "*" else c)
        i += 1
    return tokens


def _wildcard_regex(tokens: list[str | None]) -> str:
    segments: list[str] = [""]
    for token in tokens:
        if token is None:
            segments.append("")
        else:
            segments[-1] += token
    first, *middle, last = segments
    # Each inner literal is taken at its leftmost occurrence, atomically: equivalent for `*`
    # globs, and it keeps matching linear in the command length instead of polynomial.
    inner = "".join(f"(?>.*?{re.escape(segment)})" for segment in middle)
    return f"{re.escape(first)}{inner}.*{re.escape(last)}"


def _domain_pattern(content: str) -> DomainPattern:
    if not content.startswith("domain:"):
        raise ValueError("WebFetch rules take `domain:<host>`, e.g. WebFetch(domain:example.com)")
    host = content[len("domain:") :].strip().lower().rstrip(".")
    subdomains = host.startswith("*.")
    if subdomains:
        host = host[2:]
    if not _HOST.fullmatch(host):
        raise ValueError(f"`{host}` is not a host name")
    return DomainPattern(host, subdomains)
