"""Session grants: an approval that lasts as long as the session, scoped like a Claude Code rule.

A grant is a tool name plus an optional specifier in rule syntax (the `ruleContent` of Claude
Code's `permission_suggestions`), so it matches exactly as the rule `Tool(specifier)` would.
`grant_from_request` scopes an ALLOW_SESSION answer:

1. the first `addRules`/`replaceRules` allow suggestion whose rule applies to the requested
   tool is used as is (`Bash(npm run:*)`, `Read(//etc/ssl/**)`); a Bash suggestion must cover
   every part of the command, and one equal to the command itself becomes an exact match even
   if the command contains `*`;
2. a `setMode acceptEdits` suggestion on a file-editing tool becomes `Edit(./**)`: every
   edit under the working directory, as acceptEdits does for the rest of the session;
3. otherwise: Bash - exactly this command; file tools - exactly this path (a directory path
   covers what is inside it); WebFetch - this host; any other tool - every call of it.
   A call that cannot be scoped (Bash without a command, a relative file path, a URL
   without a host) gets no grant (None): the caller allows it once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from betcode.permissions.path_glob import absolute_path
from betcode.permissions.rules import (
    PATH_FAMILIES,
    BashPattern,
    InvalidRule,
    Rule,
    RuleList,
    RuleSource,
    escape_bash_literal,
    format_rule,
    parse_rule,
)
from betcode.permissions.shell_split import normalize_whitespace, split_command

GRANT_ORIGIN = "session grant"

# Tool -> the input field holding the path its permission is about.
PATH_INPUTS: dict[str, str] = {
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "NotebookRead": "notebook_path",
    "Glob": "path",
    "Grep": "path",
    "LS": "path",
}
# Tools whose `path` input defaults to the working directory.
SEARCH_TOOLS = frozenset({"Glob", "Grep", "LS"})


class GrantAction(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class SessionGrant:
    tool_name: str
    pattern: str | None = None  # a rule specifier; None: every call of the tool
    action: GrantAction = GrantAction.ALLOW

    @property
    def rule_text(self) -> str:
        return format_rule(self.tool_name, self.pattern)


def grant_rule(grant: SessionGrant) -> Rule:
    """The grant as a rule; raises InvalidRule when its pattern is malformed."""
    list_name = RuleList.ALLOW if grant.action is GrantAction.ALLOW else RuleList.DENY
    return parse_rule(grant.rule_text, RuleSource(GRANT_ORIGIN, list_name))


def grant_from_request(
    tool_name: str,
    tool_input: Mapping[str, object],
    permission_suggestions: Sequence[object] | None = None,
) -> SessionGrant | None:
    """The grant an ALLOW_SESSION answer to this request stores (module doc); None when the
    call cannot be scoped, so it is allowed once only."""
    for suggestion in permission_suggestions or ():
        grant = _from_suggestion(suggestion, tool_name, tool_input)
        if grant is not None:
            return grant
    return _default_grant(tool_name, tool_input)


def _from_suggestion(
    suggestion: object, tool_name: str, tool_input: Mapping[str, object]
) -> SessionGrant | None:
    if not isinstance(suggestion, Mapping):
        return None
    kind = suggestion.get("type")
    if kind == "setMode":
        accepts_edits = suggestion.get("mode") == "acceptEdits"
        return SessionGrant("Edit", "./**") if accepts_edits and _is_edit(tool_name) else None
    if kind not in ("addRules", "replaceRules") or suggestion.get("behavior", "allow") != "allow":
        return None
    entries = suggestion.get("rules")
    for entry in entries if isinstance(entries, list) else ():
        grant = _suggested_grant(entry, tool_name, tool_input)
        if grant is not None:
            return grant
    return None


def _suggested_grant(
    entry: object, tool_name: str, tool_input: Mapping[str, object]
) -> SessionGrant | None:
    if not isinstance(entry, Mapping):
        return None
    name, content = entry.get("toolName"), entry.get("ruleContent")
    if not isinstance(name, str) or not (content is None or isinstance(content, str)):
        return None
    command = tool_input.get("command")
    if name == "Bash" and content and isinstance(command, str):
        exact = normalize_whitespace(command)
        if normalize_whitespace(content) == exact:
            content = escape_bash_literal(exact)
    grant = SessionGrant(name, content or None)
    try:
        rule = grant_rule(grant)
    except InvalidRule:
        return None
    if not rule.applies_to(tool_name):
        return None
    if isinstance(rule.pattern, BashPattern) and isinstance(command, str):
        return grant if _covers_command(rule.pattern, command) else None
    return grant


def _covers_command(pattern: BashPattern, command: str) -> bool:
    """Whether a suggested Bash rule covers the command it was offered for."""
    if pattern.literal == normalize_whitespace(command):
        return True
    regex = re.compile(pattern.regex, re.DOTALL)
    parts = split_command(command)
    return bool(parts) and all(regex.fullmatch(part.text) for part in parts)


def _default_grant(tool_name: str, tool_input: Mapping[str, object]) -> SessionGrant | None:
    if tool_name == "Bash":
        command = tool_input.get("command")
        if isinstance(command, str) and command.strip():
            return SessionGrant("Bash", escape_bash_literal(normalize_whitespace(command)))
        return None
    if tool_name in PATH_INPUTS:
        return _path_grant(tool_name, tool_input.get(PATH_INPUTS[tool_name]))
    if tool_name == "WebFetch":
        host = url_host(tool_input.get("url"))
        return SessionGrant("WebFetch", f"domain:{host}") if host else None
    return SessionGrant(tool_name)


def _path_grant(tool_name: str, path: object) -> SessionGrant | None:
    if path is None and tool_name in SEARCH_TOOLS:
        return SessionGrant(tool_name)
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    rule_tool = tool_name if tool_name in PATH_FAMILIES else "Read"
    return SessionGrant(rule_tool, "/" + _escape_glob(absolute_path(path, "/")))


def url_host(url: object) -> str | None:
    """The lower-case host of a URL, or None when there is none."""
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url).hostname or None
    except ValueError:
        return None


def _is_edit(tool_name: str) -> bool:
    return tool_name in PATH_FAMILIES["Edit"]


def _escape_glob(path: str) -> str:
    return "".join("\\" + c if c in "*?[\\" else c for c in path)
