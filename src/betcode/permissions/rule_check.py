"""The permission rules in the settings files that cannot be used, told where people look:
`daemon start` prints them, `daemon status` and `doctor` show them, `config check` fails on
them. Such a rule is skipped when rules are applied (it allows and denies nothing), so a
deny rule with a typo would otherwise protect nothing without a word until the first approval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from betcode.config.errors import ConfigError
from betcode.config.layers import load_permission_layers
from betcode.permissions.engine import RuleSet


@dataclass(frozen=True, slots=True)
class UnusableRule:
    """A rule that does not parse: its file (or "cli"), its line there if found, its list,
    its text and why."""

    origin: str
    line: int | None
    list_name: str
    text: str
    reason: str

    def __str__(self) -> str:
        where = self.origin if self.line is None else f"{self.origin}:{self.line}"
        return (
            f"{where}: {self.list_name} rule {self.text!r} does not parse ({self.reason}); "
            "it allows and denies nothing"
        )


def unusable_rules(cwd: Path, config_dir: Path) -> list[UnusableRule]:
    """The unusable rules of the settings that apply in `cwd` (project, then user files).
    Raises ConfigError for a settings file that cannot be read or is not a JSON object."""
    _, invalid = RuleSet.from_settings(load_permission_layers(cwd, config_dir))
    return [
        UnusableRule(
            error.source.origin,
            _line_of(error.source.origin, error.text),
            str(error.source.list_name),
            error.text,
            error.reason,
        )
        for error in invalid
    ]


def _line_of(origin: str, text: str) -> int | None:
    """The line of the settings file `origin` where the rule's JSON string is written."""
    try:
        content = Path(origin).read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    for written in (json.dumps(text), json.dumps(text, ensure_ascii=False)):
        at = content.find(written)
        if at >= 0:
            return content.count("\n", 0, at) + 1
    return None


def rule_problems(cwd: Path, config_dir: Path) -> list[str]:
    """What `unusable_rules` finds, one line each; a settings file that cannot be read (its
    rules are then not applied at all) is one too."""
    try:
        return [str(rule) for rule in unusable_rules(cwd, config_dir)]
    except ConfigError as error:
        return [str(error)]
