"""Permission layers of a session: which files, in which order, with which base directory, and
what happens to entries that are not rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from betcode.config.errors import ConfigError
from betcode.config.layers import PermissionLists, RejectedEntry, load_permission_layers
from betcode.permissions.engine import Behavior, RuleSet, evaluate


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "proj", tmp_path / "cfg"


def test_every_layer_highest_first(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    local = write(cwd / ".claude/settings.local.json", {"permissions": {"allow": ["Bash(a)"]}})
    project = write(cwd / ".claude/settings.json", {"permissions": {"deny": ["Bash(b)"]}})
    user = write(cfg / "settings.json", {"permissions": {"ask": ["Bash(c)"]}, "model": "x"})
    layers = load_permission_layers(cwd, cfg, PermissionLists(allow=("Read",)))
    assert [(layer.origin, layer.base_dir) for layer in layers] == [
        ("cli", None),
        (str(local), cwd),
        (str(project), cwd),
        (str(user), cfg),
    ]
    assert layers[0].rules == PermissionLists(allow=("Read",))
    assert layers[1].rules == PermissionLists(allow=("Bash(a)",))
    assert layers[2].rules == PermissionLists(deny=("Bash(b)",))
    assert layers[3].rules == PermissionLists(ask=("Bash(c)",))


def test_missing_files_are_skipped(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    assert load_permission_layers(cwd, cfg) == []
    write(cwd / ".claude/settings.json", {})
    assert [layer.rules for layer in load_permission_layers(cwd, cfg)] == [PermissionLists()]


def test_rules_of_all_layers_apply_together(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    write(cwd / ".claude/settings.local.json", {"permissions": {"allow": ["Bash(git *)"]}})
    write(cfg / "settings.json", {"permissions": {"deny": ["Bash(git push:*)"]}})
    ruleset, invalid = RuleSet.from_settings(load_permission_layers(cwd, cfg))
    assert invalid == []

    def decide(command: str) -> Behavior:
        return evaluate(ruleset, "Bash", {"command": command}, cwd=cwd, home="/h").behavior

    assert decide("git status") is Behavior.ALLOW
    assert decide("git push") is Behavior.DENY


def test_slash_paths_are_relative_to_each_files_directory(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    write(cwd / ".claude/settings.json", {"permissions": {"allow": ["Read(/docs/**)"]}})
    ruleset, _ = RuleSet.from_settings(load_permission_layers(cwd, cfg))
    inside = evaluate(ruleset, "Read", {"file_path": str(cwd / "docs/a.md")}, cwd=cwd, home="/h")
    assert inside.behavior is Behavior.ALLOW


def test_entries_that_are_not_rules_are_rejected_not_fatal(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    write(
        cwd / ".claude/settings.json",
        {"permissions": {"allow": ["Bash(ls)", 7, None], "deny": "Bash(rm:*)"}},
    )
    (layer,) = load_permission_layers(cwd, cfg)
    assert layer.rules == PermissionLists(allow=("Bash(ls)",))
    assert layer.rejected == (
        RejectedEntry("deny", '"Bash(rm:*)"', "permissions.deny must be a list of rule strings"),
        RejectedEntry("allow", "7", "a rule must be a string"),
        RejectedEntry("allow", "null", "a rule must be a string"),
    )
    _, invalid = RuleSet.from_settings([layer])
    assert len(invalid) == 3


def test_permissions_that_is_not_an_object_is_ignored(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    write(cwd / ".claude/settings.json", {"permissions": ["Bash"]})
    (layer,) = load_permission_layers(cwd, cfg)
    assert layer.rules == PermissionLists()


def test_malformed_project_file_names_file_line_and_column(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    path = write(cwd / ".claude/settings.local.json", '{\n  "permissions": {\n    "allow": [}\n')
    with pytest.raises(ConfigError) as caught:
        load_permission_layers(cwd, cfg)
    assert str(caught.value).startswith(f"{path}: malformed JSON at line 3, column 15")


def test_unreadable_and_non_utf8_files(dirs: tuple[Path, Path]) -> None:
    cwd, cfg = dirs
    (cwd / ".claude/settings.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_permission_layers(cwd, cfg)
    cfg.mkdir()
    (cfg / "settings.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_permission_layers(cwd / "elsewhere", cfg)
