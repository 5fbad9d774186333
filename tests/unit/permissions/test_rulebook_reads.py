"""A settings file whose read never ends (a FIFO nobody writes) holds up no lookup for longer
than the rule book's read timeout: the rules read before apply (none at first: the user is
asked), and what the read finds once it ends is used from then on."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from betcode.permissions.rulebook import RuleBook

TIMEOUT = 0.3
ALLOW_ECHO = {"permissions": {"allow": ["Bash(echo:*)"]}}


def project_with_a_fifo(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose settings.local.json is a FIFO; (project, fifo)."""
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    fifo = project / ".claude" / "settings.local.json"
    os.mkfifo(fifo)
    return project, fifo


def write_into(fifo: Path, settings: Mapping[str, object]) -> None:
    with fifo.open("w") as writing:  # blocks until the rule book's thread opens it to read
        json.dump(settings, writing)


async def test_a_read_that_hangs_is_waited_for_at_most_the_timeout_then_no_rules_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project, fifo = project_with_a_fifo(tmp_path)
    rules = RuleBook(tmp_path / "config", home=tmp_path, read_timeout=TIMEOUT)

    started = time.monotonic()
    with caplog.at_level(logging.ERROR):
        first = await rules.rules_for(str(project))
        again = await rules.rules_for(str(project))  # the read still hangs: no second wait
    waited = time.monotonic() - started

    assert TIMEOUT <= waited < TIMEOUT + 2.0
    assert (len(first.ruleset.rules), len(again.ruleset.rules)) == (0, 0)
    assert first.error is not None
    assert "not read within 0.3 s" in str(first.error)
    [logged] = [r.getMessage() for r in caplog.records if "not read within" in r.getMessage()]
    assert "no rules apply" in logged

    # Once the read ends, its rules are the directory's.
    await asyncio.to_thread(write_into, fifo, ALLOW_ECHO)
    deadline = time.monotonic() + 10
    while not (loaded := await rules.rules_for(str(project))).ruleset.rules:
        assert time.monotonic() < deadline, "the rules read late were never used"
        await asyncio.sleep(0.01)
    assert loaded.error is None
    assert [rule.text for rule in loaded.ruleset.rules] == ["Bash(echo:*)"]


async def test_after_a_reload_a_read_that_hangs_keeps_the_rules_read_before(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(ALLOW_ECHO))
    rules = RuleBook(tmp_path / "config", home=tmp_path, read_timeout=TIMEOUT)
    assert len((await rules.rules_for(str(project))).ruleset.rules) == 1

    settings.unlink()
    os.mkfifo(settings)
    rules.reload()
    kept = await rules.rules_for(str(project))

    assert [rule.text for rule in kept.ruleset.rules] == ["Bash(echo:*)"]
    assert kept.error is not None
    await asyncio.to_thread(write_into, settings, {})  # lets the thread end
