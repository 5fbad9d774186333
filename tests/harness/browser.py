"""Debian's Chromium driven by Playwright (`executable_path`; never a browser download of
Playwright's own): the module-level check that skips loudly without it, and the launch."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

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


PHONE = {"width": 390, "height": 844}


@asynccontextmanager
async def phone_page(browser: Any, **options: Any) -> AsyncIterator[Any]:
    """A page at phone size (390×844, touch), in a browser context of its own."""
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, **options)
    try:
        yield await context.new_page()
    finally:
        await context.close()


def trusting(cert_file: Path) -> list[str]:
    """Chromium's arguments to take this certificate's key as valid (a service worker is
    registered only from an origin whose certificate is: ignoring HTTPS errors is not enough)."""
    certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pin = base64.b64encode(hashlib.sha256(spki).digest()).decode()
    return [f"--ignore-certificate-errors-spki-list={pin}"]
