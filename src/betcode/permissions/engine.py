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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from betcode.config.layers import RULE_LISTS, SettingsLayer
from betcode.permissions.grants import SessionGrant, grant_rule
from betcode.permissions.matching import RuleIndex, ToolCall, cover, first_stop
from betcode.permissions.rules import InvalidRule, Rule, RuleList, RuleSource, parse_rule

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
        self._deny = RuleIndex(r for r in self.rules if r.source.list_name is RuleList.DENY)
        self._ask = RuleIndex(r for r in self.rules if r.source.list_name is RuleList.ASK)
        self._allow = RuleIndex(r for r in self.rules if r.source.list_name is RuleList.ALLOW)

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
    call = ToolCall.prepare(tool_name, tool_input, os.fspath(cwd), os.fspath(home))
    rule = first_stop(ruleset._deny, call)
    if rule is not None:
        return Decision(Behavior.DENY, (rule,), f"Denied by rule: {rule.describe()}")
    rule = first_stop(ruleset._ask, call)
    if rule is not None:
        return Decision(Behavior.ASK, (rule,), f"Approval required by rule: {rule.describe()}")
    covering = cover((ruleset._allow,), call)
    if covering:
        return Decision(Behavior.ALLOW, covering)
    if not grants:
        return UNDECIDED
    allow_grants, deny_grants = _grant_indexes(tuple(grants))
    rule = first_stop(deny_grants, call)
    if rule is not None:
        return Decision(Behavior.DENY, (rule,), f"Denied by rule: {rule.describe()}")
    covering = cover((ruleset._allow, allow_grants), call)
    return Decision(Behavior.ALLOW, covering) if covering else UNDECIDED


@functools.lru_cache(maxsize=256)
def _grant_indexes(grants: tuple[SessionGrant, ...]) -> tuple[RuleIndex, RuleIndex]:
    rules: list[Rule] = []
    for grant in grants:
        try:
            rules.append(grant_rule(grant))
        except InvalidRule as error:
            log.warning("session grant ignored: %s", error)
    allows = (r for r in rules if r.source.list_name is RuleList.ALLOW)
    return RuleIndex(allows), RuleIndex(r for r in rules if r.source.list_name is RuleList.DENY)
