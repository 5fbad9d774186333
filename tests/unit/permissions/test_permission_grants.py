"""grant_from_request: an ALLOW_SESSION answer is scoped like the rule Claude Code would write.
The suggestion shapes are the ones the real CLI sends (docs/PROTOCOL.md#permission-requests)."""

from __future__ import annotations

import pytest

from betcode.permissions.engine import Behavior, RuleSet, evaluate
from betcode.permissions.grants import GrantAction, SessionGrant, grant_from_request

CWD = "/work/proj"


def add_rules(
    tool: str, content: str | None, destination: str = "localSettings"
) -> dict[str, object]:
    rule: dict[str, object] = {"toolName": tool}
    if content is not None:
        rule["ruleContent"] = content
    return {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": destination}


@pytest.mark.parametrize(
    ("tool", "tool_input", "suggestions", "grant"),
    [
        pytest.param(
            "Bash",
            {"command": "python3 -c \"print('hi')\""},
            [add_rules("Bash", "python3 -c \"print('hi')\"")],
            SessionGrant("Bash", "python3 -c \"print('hi')\""),
            id="bash exact suggestion",
        ),
        pytest.param(
            "Bash",
            {"command": "ls /etc/ssl"},
            [add_rules("Bash", "ls /etc/ssl"), add_rules("Read", "//etc/ssl/**", "session")],
            SessionGrant("Bash", "ls /etc/ssl"),
            id="bash outside cwd: the Bash suggestion, not the Read one",
        ),
        pytest.param(
            "Bash",
            {"command": "npm run build"},
            [add_rules("Bash", "npm run:*")],
            SessionGrant("Bash", "npm run:*"),
            id="bash prefix suggestion",
        ),
        pytest.param(
            "Bash",
            {"command": "ls *.py"},
            [add_rules("Bash", "ls *.py")],
            SessionGrant("Bash", "ls \\*.py"),
            id="bash suggestion equal to the command is exact",
        ),
        pytest.param(
            "Bash",
            {"command": "rm   -rf  build"},
            [],
            SessionGrant("Bash", "rm -rf build"),
            id="bash without suggestions: the command",
        ),
        pytest.param(
            "Read",
            {"file_path": "/etc/hosts"},
            [add_rules("Read", "//etc/**", "session")],
            SessionGrant("Read", "//etc/**"),
            id="read outside cwd",
        ),
        pytest.param(
            "Glob",
            {"pattern": "*", "path": "/etc/ssl"},
            [add_rules("Read", "//etc/ssl/**", "session")],
            SessionGrant("Read", "//etc/ssl/**"),
            id="glob takes a Read suggestion",
        ),
        pytest.param(
            "Write",
            {"file_path": f"{CWD}/a.txt", "content": "x"},
            [{"type": "setMode", "mode": "acceptEdits", "destination": "session"}],
            SessionGrant("Edit", "./**"),
            id="write inside cwd: acceptEdits",
        ),
        pytest.param(
            "Edit",
            {"file_path": f"{CWD}/src/a[1].py"},
            [],
            SessionGrant("Edit", "//work/proj/src/a\\[1].py"),
            id="edit without suggestions: that file",
        ),
        pytest.param(
            "Grep",
            {"pattern": "x"},
            [],
            SessionGrant("Grep"),
            id="grep of cwd",
        ),
        pytest.param(
            "WebFetch",
            {"url": "https://Docs.Example.com/a"},
            [],
            SessionGrant("WebFetch", "domain:docs.example.com"),
            id="webfetch: the host",
        ),
        pytest.param(
            "mcp__github__create_issue",
            {"title": "x"},
            [],
            SessionGrant("mcp__github__create_issue"),
            id="mcp tool",
        ),
        pytest.param(
            "Bash",
            {"command": "make"},
            [
                "not a mapping",
                {"type": "addRules", "rules": "nope"},
                {"type": "addRules", "behavior": "deny", "rules": [{"toolName": "Bash"}]},
                add_rules("Bash", "cmake:*"),
                add_rules("Grep", "x"),
            ],
            SessionGrant("Bash", "make"),
            id="malformed or foreign suggestions ignored",
        ),
    ],
)
def test_grant_scope(
    tool: str, tool_input: dict[str, object], suggestions: list[object], grant: SessionGrant
) -> None:
    assert grant_from_request(tool, tool_input, suggestions) == grant


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Bash", {}),
        ("Bash", {"command": "   "}),
        ("Read", {"file_path": "relative/path"}),
        ("Edit", {}),
        ("WebFetch", {"url": "not a url"}),
    ],
)
def test_calls_that_cannot_be_scoped_get_no_grant(tool: str, tool_input: dict[str, object]) -> None:
    assert grant_from_request(tool, tool_input, None) is None


def test_accept_edits_grant_covers_every_edit_tool_in_cwd_only() -> None:
    grant = grant_from_request(
        "Edit", {"file_path": f"{CWD}/a.py"}, [{"type": "setMode", "mode": "acceptEdits"}]
    )
    assert grant is not None

    def decide(tool: str, path: str) -> Behavior:
        tool_input = {"file_path": path, "notebook_path": path}
        return evaluate(RuleSet(), tool, tool_input, cwd=CWD, home="/h", grants=[grant]).behavior

    assert decide("Write", f"{CWD}/deep/new.py") is Behavior.ALLOW
    assert decide("NotebookEdit", f"{CWD}/n.ipynb") is Behavior.ALLOW
    assert decide("Edit", "/etc/passwd") is Behavior.UNDECIDED
    assert decide("Read", f"{CWD}/a.py") is Behavior.UNDECIDED


def test_deny_grant() -> None:
    grant = SessionGrant("WebFetch", "domain:evil.org", GrantAction.DENY)
    decision = evaluate(
        RuleSet(), "WebFetch", {"url": "https://evil.org/"}, cwd=CWD, home="/h", grants=[grant]
    )
    assert decision.behavior is Behavior.DENY
    assert decision.message == "Denied by rule: WebFetch(domain:evil.org) (from session grant)"
