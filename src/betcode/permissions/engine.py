"""The decision engine: what the rules and session grants say about one tool call. Pure.

Order (first hit decides; specificity never reorders it):

1. a deny rule matches -> DENY, with the message `Denied by rule: <rule> (from <origin>)`;
2. an ask rule matches -> ASK (the call goes to the user even if an allow rule matches);
3. allow rules cover the call -> ALLOW;
4. a deny grant matches -> DENY; allow rules and allow grants together cover the call -> ALLOW;
5. otherwise UNDECIDED: the call is forwarded to the clients.

AskUserQuestion and ExitPlanMode need the user by nature and are always UNDECIDED.

A Bash command is first split into its simple commands (see `shell_split`):

* deny / ask: the call is caught if the whole command, or ANY part, in any of its views
  (wrappers such as `sudo`, `env X=1`, `timeout 5` stripped; quotes removed; `/bin/rm` as
  `rm`), matches. A literal deny/ask pattern also catches the command with more words.
* allow: an exact (wildcard-free) rule equal to the whole command allows it as written;
  otherwise EVERY part must be allowed by some rule (or grant), and an opaque part (command or
  process substitution, output redirection to a file, here-document) can only be allowed by a
  rule for every Bash call, since its words do not say what it does.
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from betcode.config.layers import RULE_LISTS, SettingsLayer
from betcode.permissions.grants import (
    PATH_INPUTS,
    SEARCH_TOOLS,
    SessionGrant,
    grant_rule,
    url_host,
)
from betcode.permissions.path_glob import PathPattern, absolute_path, relative_to
from betcode.permissions.rules import (
    PATH_FAMILIES,
    BashPattern,
    DomainPattern,
    InvalidRule,
    Rule,
    RuleList,
    RuleSource,
    parse_rule,
)
from betcode.permissions.shell_split import (
    CommandPart,
    match_views,
    normalize_whitespace,
    split_command,
)

INTERACTIVE_TOOLS = frozenset({"AskUserQuestion", "ExitPlanMode"})

log = logging.getLogger(__name__)


class Behavior(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class Decision:
    """`rules` are the rules (or grants, origin "session grant") that decided."""

    behavior: Behavior
    rules: tuple[Rule, ...] = ()
    message: str = ""


UNDECIDED = Decision(Behavior.UNDECIDED)


class RuleSet:
    """Every rule that applies to a session, indexed by list and tool."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules = tuple(rules)
        self._deny = _RuleIndex(r for r in self.rules if r.source.list_name is RuleList.DENY)
        self._ask = _RuleIndex(r for r in self.rules if r.source.list_name is RuleList.ASK)
        self._allow = _RuleIndex(r for r in self.rules if r.source.list_name is RuleList.ALLOW)

    @classmethod
    def from_settings(cls, layers: Iterable[SettingsLayer]) -> tuple[RuleSet, list[InvalidRule]]:
        """All rules of `layers`; invalid ones are returned, not raised, and left out."""
        rules: list[Rule] = []
        invalid: list[InvalidRule] = []
        for layer in layers:
            base = posixpath.normpath(os.fspath(layer.base_dir)) if layer.base_dir else None
            for list_name in RULE_LISTS:
                source = RuleSource(layer.origin, RuleList(list_name), base)
                for text in layer.rules.get(list_name):
                    try:
                        rules.append(parse_rule(text, source))
                    except InvalidRule as error:
                        invalid.append(error)
            for entry in layer.rejected:
                source = RuleSource(layer.origin, RuleList(entry.list_name), base)
                invalid.append(InvalidRule(entry.text, source, entry.reason))
        return cls(rules), invalid


def evaluate(
    ruleset: RuleSet,
    tool_name: str,
    tool_input: Mapping[str, object],
    *,
    cwd: str | os.PathLike[str],
    home: str | os.PathLike[str],
    grants: Sequence[SessionGrant] = (),
) -> Decision:
    """The decision for one call (module doc for the order and the Bash rules)."""
    if tool_name in INTERACTIVE_TOOLS:
        return UNDECIDED
    call = _Call.prepare(tool_name, tool_input, os.fspath(cwd), os.fspath(home))
    rule = _first_stop(ruleset._deny, call)
    if rule is not None:
        return Decision(Behavior.DENY, (rule,), f"Denied by rule: {rule.describe()}")
    rule = _first_stop(ruleset._ask, call)
    if rule is not None:
        return Decision(Behavior.ASK, (rule,), f"Approval required by rule: {rule.describe()}")
    covering = _cover((ruleset._allow,), call)
    if covering:
        return Decision(Behavior.ALLOW, covering)
    if not grants:
        return UNDECIDED
    allow_grants, deny_grants = _grant_indexes(tuple(grants))
    rule = _first_stop(deny_grants, call)
    if rule is not None:
        return Decision(Behavior.DENY, (rule,), f"Denied by rule: {rule.describe()}")
    covering = _cover((ruleset._allow, allow_grants), call)
    return Decision(Behavior.ALLOW, covering) if covering else UNDECIDED


@functools.lru_cache(maxsize=256)
def _grant_indexes(grants: tuple[SessionGrant, ...]) -> tuple[_RuleIndex, _RuleIndex]:
    rules: list[Rule] = []
    for grant in grants:
        try:
            rules.append(grant_rule(grant))
        except InvalidRule as error:
            log.warning("session grant ignored: %s", error)
    allows = (r for r in rules if r.source.list_name is RuleList.ALLOW)
    return _RuleIndex(allows), _RuleIndex(r for r in rules if r.source.list_name is RuleList.DENY)


class _RuleIndex:
    """The rules of one list, indexed for evaluation."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.whole_tool: dict[str, Rule] = {}
        self.server_wide: list[tuple[str, Rule]] = []
        self.by_tool: dict[str, list[Rule]] = {}  # path and domain rules, per tool they cover
        self.bash_literals: dict[str, Rule] = {}
        bash: list[Rule] = []
        regexes: list[str] = []
        for rule in rules:
            pattern = rule.pattern
            if pattern is None:
                prefix = rule.mcp_prefix
                if prefix is not None:
                    self.server_wide.append((prefix, rule))
                self.whole_tool.setdefault(rule.tool_name, rule)
            elif isinstance(pattern, BashPattern):
                bash.append(rule)
                regexes.append(f"(?P<r{len(regexes)}>{pattern.regex})")
                if pattern.literal is not None:
                    self.bash_literals.setdefault(pattern.literal, rule)
            elif isinstance(pattern, PathPattern):
                for tool in PATH_FAMILIES[rule.tool_name]:
                    self.by_tool.setdefault(tool, []).append(rule)
            else:
                self.by_tool.setdefault(rule.tool_name, []).append(rule)
        self.bash = tuple(bash)
        # One alternation per list: the regex engine tries every rule in C, not in a loop here.
        self.bash_regex = re.compile("|".join(regexes), re.DOTALL) if regexes else None

    def tool_rule(self, tool_name: str) -> Rule | None:
        rule = self.whole_tool.get(tool_name)
        if rule is not None:
            return rule
        for prefix, server_rule in self.server_wide:
            if tool_name.startswith(prefix):
                return server_rule
        return None

    def bash_rule(self, text: str) -> Rule | None:
        if self.bash_regex is None:
            return None
        match = self.bash_regex.fullmatch(text)
        if match is None or match.lastgroup is None:
            return None
        return self.bash[int(match.lastgroup[1:])]


@dataclass(frozen=True, slots=True)
class _Call:
    """The parts of one call that rules look at, computed once."""

    tool_name: str
    cwd: str
    home: str
    command: str | None = None  # Bash: the whole command, whitespace-normalised
    parts: tuple[CommandPart, ...] = ()
    stop_views: tuple[str, ...] = ()
    path: str | None = None  # file tools: absolute, normalised
    host: str | None = None  # WebFetch

    @classmethod
    def prepare(
        cls, tool_name: str, tool_input: Mapping[str, object], cwd: str, home: str
    ) -> _Call:
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


def _first_stop(index: _RuleIndex, call: _Call) -> Rule | None:
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


def _cover(indexes: Sequence[_RuleIndex], call: _Call) -> tuple[Rule, ...]:
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


def _cover_command(indexes: Sequence[_RuleIndex], call: _Call) -> tuple[Rule, ...]:
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


def _specifier_rule(index: _RuleIndex, call: _Call) -> Rule | None:
    relative: dict[str, str] = {}
    for rule in index.by_tool.get(call.tool_name, ()):
        pattern = rule.pattern
        if isinstance(pattern, PathPattern) and call.path is not None:
            anchor = pattern.anchor_dir(cwd=call.cwd, home=call.home)
            if anchor not in relative:
                relative[anchor] = relative_to(call.path, anchor)
            if pattern.matches_relative(relative[anchor]):
                return rule
        elif isinstance(pattern, DomainPattern) and call.host and pattern.matches(call.host):
            return rule
    return None
