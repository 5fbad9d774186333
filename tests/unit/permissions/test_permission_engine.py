"""The decision engine around the matcher: messages, reported rules, settings layers with
invalid entries, and properties over arbitrary input."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from betcode.config.layers import PermissionLists, RejectedEntry, SettingsLayer
from betcode.permissions.engine import Behavior, RuleSet, evaluate
from betcode.permissions.grants import grant_from_request
from betcode.permissions.rules import RuleList, RuleSource, parse_rule

CWD = "/work/proj"
HOME = "/home/me"


def layer(origin: str, base: str | None = None, **lists: tuple[str, ...]) -> SettingsLayer:
    return SettingsLayer(origin, Path(base) if base else None, PermissionLists(**lists))


def test_deny_message_names_the_rule_and_its_file() -> None:
    ruleset, invalid = RuleSet.from_settings(
        [layer("/x/.claude/settings.json", "/x", deny=("Bash(rm:*)",))]
    )
    decision = evaluate(ruleset, "Bash", {"command": "rm -rf build"}, cwd=CWD, home=HOME)
    assert invalid == []
    assert decision.behavior is Behavior.DENY
    assert decision.message == "Denied by rule: Bash(rm:*) (from /x/.claude/settings.json)"
    assert [(r.text, r.source.origin) for r in decision.rules] == [
        ("Bash(rm:*)", "/x/.claude/settings.json")
    ]


def test_allow_reports_every_rule_that_covered_a_part() -> None:
    ruleset = RuleSet(
        parse_rule(text, RuleSource("cli", RuleList.ALLOW))
        for text in ("Bash(npm test)", "Bash(git *)", "Bash(ls)")
    )
    decision = evaluate(
        ruleset, "Bash", {"command": "npm test && git status && npm test"}, cwd=CWD, home=HOME
    )
    assert decision.behavior is Behavior.ALLOW
    assert [r.text for r in decision.rules] == ["Bash(npm test)", "Bash(git *)"]
    assert decision.message == ""


def test_ask_message_names_the_rule() -> None:
    ruleset, _ = RuleSet.from_settings([layer("cli", ask=("Bash(git push:*)",))])
    decision = evaluate(ruleset, "Bash", {"command": "git push"}, cwd=CWD, home=HOME)
    assert decision.behavior is Behavior.ASK
    assert "Bash(git push:*)" in decision.message


def test_invalid_rules_are_reported_and_the_others_still_apply() -> None:
    layers = [
        SettingsLayer(
            "/p/.claude/settings.local.json",
            Path("/p"),
            PermissionLists(allow=("Bash(npm test", "Bash(npm test)"), deny=("Grep(x)",)),
            (RejectedEntry("ask", "42", "a rule must be a string"),),
        ),
        layer("/cfg/settings.json", "/cfg", deny=("Bash(rm:*)", "WebFetch(example.com)")),
    ]
    ruleset, invalid = RuleSet.from_settings(layers)
    assert [(e.text, e.source.origin, e.source.list_name) for e in invalid] == [
        ("Grep(x)", "/p/.claude/settings.local.json", RuleList.DENY),
        ("Bash(npm test", "/p/.claude/settings.local.json", RuleList.ALLOW),
        ("42", "/p/.claude/settings.local.json", RuleList.ASK),
        ("WebFetch(example.com)", "/cfg/settings.json", RuleList.DENY),
    ]
    assert all(e.reason for e in invalid)
    assert [r.text for r in ruleset.rules] == ["Bash(npm test)", "Bash(rm:*)"]
    allowed = evaluate(ruleset, "Bash", {"command": "npm test"}, cwd=CWD, home=HOME)
    denied = evaluate(ruleset, "Bash", {"command": "rm x"}, cwd=CWD, home=HOME)
    assert (allowed.behavior, denied.behavior) == (Behavior.ALLOW, Behavior.DENY)


def test_a_deny_in_a_lower_layer_beats_an_allow_in_a_higher_one() -> None:
    ruleset, _ = RuleSet.from_settings(
        [
            layer("cli", allow=("Bash",)),
            layer("/p/.claude/settings.json", "/p", allow=("Bash(curl:*)",)),
            layer("/cfg/settings.json", "/cfg", deny=("Bash(curl:*)",)),
        ]
    )
    decision = evaluate(ruleset, "Bash", {"command": "curl x"}, cwd=CWD, home=HOME)
    assert decision.behavior is Behavior.DENY
    assert decision.rules[0].source.origin == "/cfg/settings.json"


def test_settings_relative_paths_use_each_layers_directory() -> None:
    ruleset, _ = RuleSet.from_settings(
        [
            layer("/p/.claude/settings.json", "/p", allow=("Read(/docs/**)",)),
            layer("/cfg/settings.json", "/cfg", allow=("Read(/notes/**)",)),
        ]
    )

    def read(path: str) -> Behavior:
        return evaluate(ruleset, "Read", {"file_path": path}, cwd="/p/sub", home=HOME).behavior

    assert read("/p/docs/a.md") is Behavior.ALLOW
    assert read("/cfg/notes/a.md") is Behavior.ALLOW
    assert read("/p/notes/a.md") is Behavior.UNDECIDED


def test_cwd_and_home_may_be_paths() -> None:
    ruleset, _ = RuleSet.from_settings([layer("cli", allow=("Read(~/x/**)",))])
    decision = evaluate(
        ruleset, "Read", {"file_path": "/home/me/x/a"}, cwd=Path(CWD), home=Path(HOME)
    )
    assert decision.behavior is Behavior.ALLOW


RULESET, _ = RuleSet.from_settings(
    [
        layer(
            "cli",
            allow=("Bash(npm run:*)", "Bash(git *)", "Bash(ls)", "Read(src/**)"),
            deny=("Bash(rm:*)", "Read(//etc/**)"),
            ask=("Bash(git push:*)",),
        )
    ]
)


@given(st.text())
def test_no_command_crashes_evaluate(command: str) -> None:
    decision = evaluate(RULESET, "Bash", {"command": command}, cwd=CWD, home=HOME)
    assert decision.behavior in Behavior


@given(st.sampled_from(["Read", "Edit", "Glob", "WebFetch", "Bash", "mcp__x__y"]), st.text())
def test_no_input_value_crashes_evaluate(tool: str, value: str) -> None:
    tool_input = {"file_path": value, "path": value, "url": value, "command": value}
    decision = evaluate(RULESET, tool, tool_input, cwd=CWD, home=HOME)
    assert decision.behavior in Behavior


@given(st.text().filter(lambda c: c.strip() and "\x00" not in c))
def test_session_grant_allows_exactly_the_granted_command(command: str) -> None:
    grant = grant_from_request("Bash", {"command": command}, [])
    assert grant is not None
    empty = RuleSet()
    again = evaluate(empty, "Bash", {"command": command}, cwd=CWD, home=HOME, grants=[grant])
    other = evaluate(empty, "Bash", {"command": command + " x"}, cwd=CWD, home=HOME, grants=[grant])
    assert again.behavior is Behavior.ALLOW
    assert other.behavior is Behavior.UNDECIDED


FILE_NAMES = st.text(alphabet=st.characters(blacklist_characters="/\x00"), min_size=1)


@given(FILE_NAMES.filter(lambda name: name not in (".", "..")))
def test_session_grant_allows_exactly_the_granted_file(name: str) -> None:
    path = f"/work/proj/{name}"
    grant = grant_from_request("Edit", {"file_path": path}, [])
    assert grant is not None
    empty = RuleSet()
    same = evaluate(empty, "Edit", {"file_path": path}, cwd=CWD, home=HOME, grants=[grant])
    sibling = evaluate(empty, "Edit", {"file_path": path + "x"}, cwd=CWD, home=HOME, grants=[grant])
    assert same.behavior is Behavior.ALLOW
    assert sibling.behavior is Behavior.UNDECIDED
