from __future__ import annotations

import logging
from pathlib import Path

import pytest

from betcode.web.install import INSTALL_FILES, install_files
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


def test_a_daemon_without_the_built_service_worker_starts_and_says_how_to_build_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in INSTALL_FILES:
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "sw.js").unlink()
    with caplog.at_level(logging.ERROR):
        files = install_files(tmp_path)
    assert set(files) == set(INSTALL_FILES) - {"sw.js"}
    assert "sw.js not built; run scripts/setup" in caplog.text
    assert b"addEventListener" in install_files(STATIC)["sw.js"]  # scripts/setup built it
