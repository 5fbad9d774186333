"""Debian's Chromium driven by Playwright (`executable_path`; never a browser download of
Playwright's own): the module-level check that skips loudly without it, and the launch."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def require_chromium(what: str) -> Any:
    """Playwright's async API; without it or Chromium, the calling test module is skipped,
    saying that `what` did not run."""
    api = pytest.importorskip(
        "playwright.async_api", reason="Playwright for Python is not installed (pip: playwright)"
    )
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"SKIPPED LOUDLY: no Chromium at {CHROMIUM} (Debian package `chromium`): {what} "
            "did not run",
            allow_module_level=True,
        )
    return api


@asynccontextmanager
async def chromium(api: Any) -> AsyncIterator[Any]:
    async with api.async_playwright() as driver:
        # Chromium refuses to run as root with its sandbox on.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = await driver.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield launched
        finally:
            await launched.close()
