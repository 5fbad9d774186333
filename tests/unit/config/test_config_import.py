"""Importing ~/.claude settings and rules (copies, never links; ~/.claude untouched), and the
`betcode config import` command (`config show`: test_config_show.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from betcode.cli.config_cmd import config_group, offer_first_run_import
from betcode.config.importer import apply_import, is_first_run, plan_import

SETTINGS = {"permissions": {"allow": ["Bash(npm test)"], "deny": ["Read(./.env)"]}, "model": "x"}


def snapshot(root: Path) -> dict[str, tuple[str, float]]:
    """Content hash and mtime of every file under root, and of ~/.claude.json beside it."""
    files = [p for p in root.rglob("*") if p.is_file()]
    files += [root.parent / ".claude.json"]
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime) for p in files}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    claude = home / ".claude"
    (claude / "rules" / "team").mkdir(parents=True)
    (claude / "settings.json").write_text(json.dumps(SETTINGS))
    (claude / "rules" / "style.md").write_text("# style\n")
    (claude / "rules" / "team" / "review.md").write_text("# review\n")
    (home / ".claude.json").write_text('{"oauthAccount": "secret"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(tmp_path / "cfg"))
    return home


def test_import_copies_settings_and_rules_and_leaves_claude_alone(
    home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "cfg"
    before = snapshot(home / ".claude")
    assert is_first_run(config)
    created = apply_import(plan_import(config))
    assert sorted(created) == sorted(
        [config / "settings.json", config / "rules/style.md", config / "rules/team/review.md"]
    )
    assert json.loads((config / "settings.json").read_text()) == SETTINGS
    assert (config / "rules/team/review.md").read_text() == "# review\n"
    assert not any(p.is_symlink() for p in config.rglob("*"))
    assert not (config / ".claude.json").exists()
    assert snapshot(home / ".claude") == before
    assert not is_first_run(config)


def test_a_symlinked_source_is_copied_as_a_file(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "shared-rule.md"
    real.write_text("shared\n")
    (home / ".claude/rules/linked.md").symlink_to(real)
    apply_import(plan_import(tmp_path / "cfg"))
    copied = tmp_path / "cfg/rules/linked.md"
    assert not copied.is_symlink()
    assert copied.read_text() == "shared\n"


def test_existing_files_are_never_overwritten(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "cfg"
    (config / "rules").mkdir(parents=True)
    (config / "settings.json").write_text("{}")
    (config / "rules/style.md").write_text("mine\n")
    plan = plan_import(config)
    assert [c.source.name for c in plan.copies] == ["review.md"]
    assert {path.name for path, _ in plan.skipped} == {"settings.json", "style.md"}
    apply_import(plan)
    assert (config / "settings.json").read_text() == "{}"
    assert (config / "rules/style.md").read_text() == "mine\n"


def test_malformed_claude_settings_are_reported_not_copied(home: Path, tmp_path: Path) -> None:
    (home / ".claude/settings.json").write_text('{"permissions": ')
    plan = plan_import(tmp_path / "cfg")
    ((path, reason),) = plan.skipped
    assert path == home / ".claude/settings.json"
    assert "malformed JSON at line 1" in reason
    assert all(c.source.suffix == ".md" for c in plan.copies)


def test_nothing_to_import(tmp_path: Path) -> None:
    plan = plan_import(tmp_path / "cfg", tmp_path / "no-claude")
    assert (plan.copies, plan.skipped) == ((), ())


def test_cli_import_yes(home: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(config_group, ["import", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Copied 3 file(s)" in result.output
    assert (tmp_path / "cfg/settings.json").is_file()


def test_cli_import_asks_and_can_be_declined(home: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(config_group, ["import"], input="n\n")
    assert result.exit_code == 0, result.output
    assert "Nothing copied." in result.output
    assert not (tmp_path / "cfg").exists()
    accepted = CliRunner().invoke(config_group, ["import"], input="y\n")
    assert "Copied 3 file(s)" in accepted.output


def test_cli_import_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "elsewhere"
    source.mkdir()
    (source / "settings.json").write_text("{}")
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(tmp_path / "cfg"))
    result = CliRunner().invoke(config_group, ["import", "--yes", "--from", str(source)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cfg/settings.json").read_text() == "{}"


def test_first_run_offer_without_a_terminal_only_explains(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    with runner.isolation():
        offer_first_run_import()
    config = tmp_path / "cfg"
    assert config.is_dir()
    assert not (config / "settings.json").exists()
