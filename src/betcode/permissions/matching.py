"""Matching one tool call against one list of rules, fast: rules are indexed by tool, and the
regexes of Bash rules (and of path rules sharing an anchor) are joined into one alternation, so
the regex engine tries them all in C. The semantics are in `engine` and `rules`."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from betcode.permissions.grants import PATH_INPUTS, SEARCH_TOOLS, url_host
from betcode.permissions.path_glob import PathPattern, absolute_path
from betcode.permissions.rules import PATH_FAMILIES, BashPattern, DomainPattern, Rule
from betcode.permissions.shell_split import (
    CommandPart,
    match_views,
    normalize_whitespace,
    split_command,
)


class _Alternation:
    """Rules whose regexes are joined into one; `first` gives the earliest rule that matches."""

    def __init__(self, entries: Sequence[tuple[str, Rule]]) -> None:
        self.rules = tuple(rule for _, rule in entries)
        joined = "|".join(f"(?P<r{i}>{regex})" for i, (regex, _) in enumerate(entries))
        self.regex = re.compile(joined, re.DOTALL)

    def first(self, text: str) -> Rule | None:
        match = self.regex.fullmatch(text)
        if match is None or match.lastgroup is None:
            return None
        return self.rules[int(match.lastgroup[1:])]


@dataclass(frozen=True, slots=True)
class _PathGroup:
    """Path rules with the same anchor: one relative path is matched against all of them."""

    anchor: PathPattern
    rules: _Alternation

    def first(self, path: str, cwd: str, home: str) -> Rule | None:
        anchor_dir = self.anchor.anchor_dir(cwd=cwd, home=home).rstrip("/") or "/"
        if anchor_dir == "/":
            relative = path.lstrip("/") or "."
        elif path == anchor_dir:
            relative = "."
        elif path.startswith(anchor_dir + "/"):
            relative = path[len(anchor_dir) + 1 :]
        elif self.anchor.reaches_up:
            relative = posixpath.relpath(path, anchor_dir)
        else:
            return None  # outside the anchor: only patterns starting with `..` get there
        return self.rules.first(relative)


class RuleIndex:
    """The rules of one list, indexed for evaluation."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.whole_tool: dict[str, Rule] = {}
        self.server_wide: list[tuple[str, Rule]] = []
        self.bash_literals: dict[str, Rule] = {}
        self.domains: list[tuple[DomainPattern, Rule]] = []
        bash: list[tuple[str, Rule]] = []
        paths: dict[tuple[str, object, str | None, bool], list[tuple[str, Rule]]] = {}
        for rule in rules:
            pattern = rule.pattern
            if pattern is None:
                prefix = rule.mcp_prefix
                if prefix is not None:
                    self.server_wide.append((prefix, rule))
                self.whole_tool.setdefault(rule.tool_name, rule)
            elif isinstance(pattern, BashPattern):
                bash.append((pattern.regex, rule))
                if pattern.literal is not None:
                    self.bash_literals.setdefault(pattern.literal, rule)
            elif isinstance(pattern, PathPattern):
                for tool in PATH_FAMILIES[rule.tool_name]:
                    key = (tool, pattern.anchor, pattern.base_dir, pattern.reaches_up)
                    paths.setdefault(key, []).append((pattern.regex.pattern, rule))
            else:
                self.domains.append((pattern, rule))
        self.bash = _Alternation(bash) if bash else None
        self.paths: dict[str, list[_PathGroup]] = {}
        for (tool, *_), group in paths.items():
            anchor = group[0][1].pattern
            assert isinstance(anchor, PathPattern)
            self.paths.setdefault(tool, []).append(_PathGroup(anchor, _Alternation(group)))

    def tool_rule(self, tool_name: str) -> Rule | None:
        rule = self.whole_tool.get(tool_name)
        if rule is not None:
            return rule
        for prefix, server_rule in self.server_wide:
            if tool_name.startswith(prefix):
                return server_rule
        return None

    def bash_rule(self, text: str) -> Rule | None:
        return self.bash.first(text) if self.bash is not None else None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The parts of one call that rules look at, computed once."""

    tool_name: str
    cwd: str
    home: str
    command: str | None = None  # Bash: the whole command, whitespace-normalised
    parts: tuple[CommandPart, ...] = ()
    stop_views: tuple[str, ...] = ()  # what deny/ask rules are matched against
    path: str | None = None  # file tools: absolute, normalised
    host: str | None = None  # WebFetch

    @classmethod
    def prepare(
        cls, tool_name: str, tool_input: Mapping[str, object], cwd: str, home: str
    ) -> ToolCall:
        cwd, home = absolute_path(cwd, "/"), absolute_path(home, "/")
        if tool_name == "Bash":
            command = tool_input.get("command")
            if not isinstance(command, str):
                return cls(tool_name, cwd, home)
            whole = normalize_whitespace(command)
            parts = split_command(command)
            views = (whole, *(view for part in parts for view in match_views(part)))
            return cls(tool_name, cwd, home, whole, parts, tuple(dict.fromkeys(views)))
        if tool_name in PATH_INPUTS:
            raw = tool_input.get(PATH_INPUTS[tool_name])
            if raw is None and tool_name in SEARCH_TOOLS:
                raw = cwd
            path = absolute_path(raw, cwd) if isinstance(raw, str) and raw else None
            return cls(tool_name, cwd, home, path=path)
        if tool_name == "WebFetch":
            return cls(tool_name, cwd, home, host=url_host(tool_input.get("url")))
        return cls(tool_name, cwd, home)


def first_stop(index: RuleIndex, call: ToolCall) -> Rule | None:
    """The first deny/ask rule catching the call, or any part of it."""
    rule = index.tool_rule(call.tool_name)
    if rule is not None:
        return rule
    if call.command is not None:
        for view in call.stop_views:
            rule = index.bash_rule(view)
            if rule is not None:
                return rule
        return None
    return _specifier_rule(index, call)


def cover(indexes: Sequence[RuleIndex], call: ToolCall) -> tuple[Rule, ...]:
    """Allow rules that together allow the whole call; empty if they do not."""
    for index in indexes:
        rule = index.tool_rule(call.tool_name)
        if rule is not None:
            return (rule,)
    if call.command is not None:
        return _cover_command(indexes, call)
    for index in indexes:
        rule = _specifier_rule(index, call)
        if rule is not None:
            return (rule,)
    return ()


def _cover_command(indexes: Sequence[RuleIndex], call: ToolCall) -> tuple[Rule, ...]:
    assert call.command is not None
    for index in indexes:
        rule = index.bash_literals.get(call.command)
        if rule is not None:
            return (rule,)
    found: list[Rule] = []
    for part in call.parts:
        if part.opaque:
            return ()
        rule = next((r for index in indexes if (r := index.bash_rule(part.text))), None)
        if rule is None:
            return ()
        found.append(rule)
    return tuple(dict.fromkeys(found))


def _specifier_rule(index: RuleIndex, call: ToolCall) -> Rule | None:
    if call.path is not None:
        for group in index.paths.get(call.tool_name, ()):
            rule = group.first(call.path, call.cwd, call.home)
            if rule is not None:
                return rule
    elif call.host is not None:
        for domain, rule in index.domains:
            if domain.matches(call.host):
                return rule
    return None
