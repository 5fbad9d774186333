"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness.restarts import Restarts


@pytest.fixture
async def restarts(tmp_path: Path) -> AsyncIterator[Restarts]:
    """A real daemon restarted at will on tmp_path (harness.restarts), cleaned up after."""
    made = Restarts(tmp_path)
    try:
        yield made
    finally:
        await made.close()
