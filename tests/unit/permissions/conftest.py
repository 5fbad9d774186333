"""Fixtures of the bridge tests (helpers live in bridge_world)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from bridge_world import World, WorldFactory

from betcode.config.settings import PermissionSettings
from betcode.devtools.fake_claude import make_fake_claude


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[WorldFactory]:
    """`await world(script, settings=..., rules={...}, notify=[...])`: a fresh world; `rules`
    is written to the config dir's settings.json as its `permissions` object."""
    built: list[World] = []

    async def build(
        script: dict[str, Any],
        *,
        settings: PermissionSettings | None = None,
        rules: dict[str, list[str]] | None = None,
        notify: list[str] | None = None,
    ) -> World:
        root = tmp_path / f"world{len(built)}"
        (root / "project" / ".claude").mkdir(parents=True)
        (root / "config").mkdir()
        if rules is not None:
            (root / "config" / "settings.json").write_text(json.dumps({"permissions": rules}))
        fake = make_fake_claude(root / "fake", {"log": str(root / "starts.jsonl"), **script})
        made = World(root, fake, settings, notify)
        made.start()
        built.append(made)
        return made

    yield build
    for made in built:
        await made.stop()
