"""The `config` health component (`daemon status`): which settings file the daemon reads."""

from __future__ import annotations

from pathlib import Path

from betcode.composition.reload import Reloads


def test_it_names_the_settings_file_and_says_when_there_is_none(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    assert Reloads(settings).report().message == f"defaults: no {settings}"
    settings.write_text("{}\n")
    assert Reloads(settings).report().message == f"settings from {settings}"
