"""Fixtures shared by every test layer: the mock model API and the pinned real Claude Code CLI.

`tests/` is on sys.path (rootdir conftest), so helpers import as `harness.*`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from harness.claude_process import ClaudeProcess
from harness.daemon import Client, InProcessDaemon, daemon_config, running_daemon
from harness.environment import Workspace, make_workspace
from harness.paths import PinnedClaudeMissingError, require_pinned_claude
from harness.session import ClaudeSession, StartClaude
from hypothesis import HealthCheck, settings

from betcode.devtools.mock_anthropic import MockAnthropic

# The property tests check behaviour, not speed: on a loaded CI machine one example may outlast
# hypothesis' 200 ms deadline, or its data generation trip the too_slow health check.
settings.register_profile("betcode", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("betcode")


@pytest.fixture
def mock_api() -> Iterator[MockAnthropic]:
    """A mock Anthropic Messages API on a free loopback port, stopped after the test."""
    with MockAnthropic() as mock:
        yield mock


@pytest.fixture
def claude_bin() -> Path:
    """The pinned real CLI. Missing means the set-up was skipped: that is a failure."""
    try:
        return require_pinned_claude()
    except PinnedClaudeMissingError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """Scratch HOME, temp dirs and a git repository for one real-CLI test."""
    return make_workspace(tmp_path / "claude")


@pytest.fixture
async def start_claude(
    claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[StartClaude]:
    """Start real CLIs (stream-json, stdio permission prompts, partial messages) against
    `mock_api` in `workspace`; every process group is killed at teardown.

    `await start_claude(extra_args=(...), env={...})` returns a `ClaudeSession`.
    """
    started: list[ClaudeProcess] = []

    async def start(
        extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> ClaudeSession:
        process = await ClaudeProcess.start(
            claude_bin, workspace.repo, workspace.env(mock_api.base_url, env), extra_args
        )
        started.append(process)
        return ClaudeSession(process)

    yield start
    for process in started:
        await process.kill()


@pytest.fixture
async def daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[InProcessDaemon]:
    """A real daemon in this event loop, running the pinned real CLI against `mock_api`."""
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    async with running_daemon(config) as running:
        yield running


@pytest.fixture
async def clients(daemon: InProcessDaemon) -> AsyncIterator[Callable[[str], Client]]:
    """Make raw betcode.v1 clients of `daemon`; all closed at teardown."""
    made: list[Client] = []

    def make(client_id: str) -> Client:
        client = Client(daemon.socket, client_id)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()
