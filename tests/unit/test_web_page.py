from __future__ import annotations

import logging
from pathlib import Path

import pytest

from betcode.web.server import ASSETS, STATIC, page_files


def test_a_daemon_without_the_bundle_serves_a_page_saying_how_to_build_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>page</title>")
    with caplog.at_level(logging.ERROR):
        page = page_files(tmp_path)
    assert set(page) == {"index.html"}
    assert b"scripts/setup" in page["index.html"]
    assert b"npm run build" in page["index.html"]
    assert "app.js, app.css not built" in caplog.text


def test_the_built_bundle_is_served_with_the_page() -> None:
    page = page_files(STATIC)  # scripts/setup built it
    assert set(page) == {"index.html", *ASSETS}
    assert b"/static/app.js" in page["index.html"]
    assert len(page["app.js"]) > 10_000
