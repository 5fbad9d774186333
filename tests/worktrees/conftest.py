"""The `world` of the worktree tests: a registered clone of a bare repository (harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness.git_repos import GitWorld, open_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[GitWorld]:
    world = await open_world(tmp_path)
    yield world
    await world.writer.close()
    world.reader.close()
