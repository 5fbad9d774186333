"""The real CLI dying under the daemon: kill -9 mid-turn, and the watchdog killing a CLI whose
model stream stalled. Each time the session goes RESTARTING → RUNNING with --resume, clients
are told, and the next prompt is answered by the resumed CLI. A CLI that died before it saved
its conversation cannot be resumed: the session starts claude afresh and says so."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from harness.conditions import until
from harness.daemon import Client, daemon_config
from harness.environment import Workspace
from harness.fake_claude import resume_id
from harness.mock_model import conversation_sent_with

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.supervisor import SupervisorState
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.sessions.session import Session
from betcode.v1 import agent_pb2, common_pb2

pytestmark = pytest.mark.real_cli

Status = common_pb2.AgentStatus
MOCK_TEXT = "Hello from the mock model."


class World:
    """An in-process daemon (real CLI, mock model) with one client on one session."""

    def __init__(self, daemon: Daemon, client: Client) -> None:
        self.daemon = daemon
        self.client = client

    @property
    def session(self) -> Session:
        assert self.daemon.sessions is not None
        [session] = self.daemon.sessions.live
        return session

    async def restarted_after(self, old_pid: int) -> list[str]:
        """Wait until a new CLI runs the session; its argv."""
        supervisor = self.session.supervisor
        await until(
            lambda: (
                supervisor.state is SupervisorState.RUNNING
                and supervisor.pid not in (None, old_pid)
            )
        )
        assert supervisor.pid is not None
        return psutil.Process(supervisor.pid).cmdline()

    async def next_prompt_is_answered(self, mock_api: MockAnthropic, marker: str) -> None:
        """A new prompt gets the mock's reply from the same (resumed) process, which was given
        the conversation so far."""
        pid = self.session.supervisor.pid
        self.client.say("SCN:plain are you back?")
        await self.client.wait_for("turn_complete")
        text = "".join(e.text_delta.text for e in self.client.of_kind("text_delta"))
        assert text.endswith(MOCK_TEXT)
        assert self.session.supervisor.pid == pid
        assert marker in conversation_sent_with(mock_api, "are you back?")
        assert self.client.sequences == list(range(1, len(self.client.sequences) + 1))


StartWorld = Callable[[SupervisorPolicy], Awaitable[World]]

# How long the CLI may take to save a prompt to its transcript (it does so shortly after the
# turn's system/init, later on a loaded machine).
TRANSCRIPT_DEADLINE_S = 30.0


def transcript_of(workspace: Workspace, claude_session_id: str) -> Path | None:
    """Where the CLI saves the conversation (docs/PROTOCOL.md#process-lifecycle), if it saved any
    yet."""
    projects = workspace.home / ".claude" / "projects"
    return next(projects.glob(f"*/{claude_session_id}.jsonl"), None)


def saved_prompt(workspace: Workspace, claude_session_id: str, marker: str) -> bool:
    """Whether the CLI's transcript holds the user message carrying `marker`: only then can a
    CLI killed now be resumed with it."""
    transcript = transcript_of(workspace, claude_session_id)
    if transcript is None:
        return False
    for line in transcript.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the line being written
        if entry.get("type") == "user" and marker in json.dumps(entry.get("message")):
            return True
    return False


async def until_prompt_saved(world: World, workspace: Workspace, marker: str) -> str:
    """Wait until the session's CLI has saved the prompt carrying `marker`; its session id."""
    claude_session_id = world.session.claude_session_id
    assert claude_session_id is not None
    await until(lambda: saved_prompt(workspace, claude_session_id, marker), TRANSCRIPT_DEADLINE_S)
    return claude_session_id


@pytest.fixture
async def world(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[StartWorld]:
    """`await world(policy)`: a daemon with that supervisor policy and a client attached to a
    new session; the client closes before the daemon stops."""
    made: list[World] = []

    async def start(policy: SupervisorPolicy) -> World:
        config = daemon_config(
            tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url), policy=policy
        )
        daemon = Daemon(config)
        await daemon.start()
        client = Client(config.socket_path, "one")
        made.append(World(daemon, client))
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        await client.wait_for("session_info")
        return made[-1]

    yield start
    for started in made:
        await started.client.close()
        await started.daemon.stop()


async def test_kill9_of_the_cli_mid_turn_restarts_it_with_resume(
    world: StartWorld, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    started = await world(SupervisorPolicy(backoff_initial=0.1, idle_reap_seconds=None))
    client = started.client
    # Long enough to be still streaming once the prompt is saved, however slowly.
    client.say('SCN:slow {"words": 4000, "delay": 0.01} marker-kill9')
    await client.wait_for("text_delta", 10)  # mid-turn
    # Killed before it saved the prompt, the CLI would have no conversation to resume.
    await until_prompt_saved(started, workspace, "marker-kill9")
    old_pid = started.session.supervisor.pid
    assert old_pid is not None
    os.killpg(old_pid, signal.SIGKILL)

    crash = await client.wait_for("error")
    assert crash.error.code == "SUBPROCESS_CRASHED"
    assert "SIGKILL" in crash.error.message or "-9" in crash.error.message
    restarting = await client.wait_for_status(Status.AGENT_STATUS_RESTARTING, crash.sequence)
    assert "restarting with --resume" in restarting.status_change.message
    argv = await started.restarted_after(old_pid)
    assert started.session.claude_session_id is not None
    assert resume_id(argv) == started.session.claude_session_id
    # Once the resumed CLI runs, clients are told the session is idle, before any new prompt.
    again = await client.wait_for_status(Status.AGENT_STATUS_IDLE, restarting.sequence)
    assert again.status_change.message == "claude is running again"
    await started.next_prompt_is_answered(mock_api, "marker-kill9")


async def test_watchdog_kills_a_cli_whose_stream_stalled_and_resumes_it(
    world: StartWorld, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    patient = SupervisorPolicy(backoff_initial=0.1, kill_grace_seconds=1.0, idle_reap_seconds=None)
    started = await world(patient)
    client = started.client
    client.say('SCN:stall_mid_stream {"seconds": 120, "after_deltas": 2} marker-stall')
    await client.wait_for("text_delta", 2)  # then the model stream stays silent
    await until_prompt_saved(started, workspace, "marker-stall")
    old_pid = started.session.supervisor.pid
    assert old_pid is not None
    # Only now a short watchdog (a reload does this to live sessions): the real CLI's start-up
    # silence must not be what it catches.
    sessions = started.daemon.sessions
    assert sessions is not None
    settings = started.daemon.config.sessions
    sessions.apply_settings(settings, replace(patient, watchdog_seconds=0.5))

    crash = await client.wait_for("error")
    assert crash.error.code == "SUBPROCESS_CRASHED"
    restarting = await client.wait_for_status(Status.AGENT_STATUS_RESTARTING, crash.sequence)
    assert "no output for" in restarting.status_change.message
    sessions.apply_settings(settings, patient)
    argv = await started.restarted_after(old_pid)
    assert started.session.claude_session_id is not None
    assert resume_id(argv) == started.session.claude_session_id
    await started.next_prompt_is_answered(mock_api, "marker-stall")
    statuses = [e.status_change.status for e in client.of_kind("status_change")]
    assert statuses.count(Status.AGENT_STATUS_RESTARTING) == 1


async def test_a_conversation_the_cli_never_saved_starts_afresh(
    world: StartWorld, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    started = await world(SupervisorPolicy(backoff_initial=0.1, idle_reap_seconds=None))
    client = started.client
    client.say("SCN:plain marker-unsaved")
    await client.wait_for("turn_complete")
    claude_session_id = await until_prompt_saved(started, workspace, "marker-unsaved")
    transcript = transcript_of(workspace, claude_session_id)
    assert transcript is not None
    old_pid = started.session.supervisor.pid
    assert old_pid is not None
    # A CLI killed before it saved anything: frozen first, it writes nothing after its
    # transcript is gone.
    os.killpg(old_pid, signal.SIGSTOP)
    transcript.unlink()
    os.killpg(old_pid, signal.SIGKILL)

    def lost_notice() -> agent_pb2.AgentEvent | None:
        errors = client.of_kind("error")
        return next((e for e in errors if e.error.code == "CONVERSATION_LOST"), None)

    await until(lambda: lost_notice() is not None, 60.0)
    lost = lost_notice()
    assert lost is not None
    assert not lost.error.is_fatal
    assert claude_session_id in lost.error.message
    assert "earlier context" in lost.error.message
    again = await client.wait_for_status(Status.AGENT_STATUS_IDLE, lost.sequence)
    assert again.status_change.message == "claude is running again"
    supervisor = started.session.supervisor
    afresh_pid = supervisor.pid
    assert afresh_pid is not None
    argv = psutil.Process(afresh_pid).cmdline()
    assert resume_id(argv) is None
    # The new conversation keeps the session's claude session id.
    assert argv[argv.index("--session-id") + 1] == claude_session_id
    answered = len(client.of_kind("turn_complete"))
    client.say("SCN:plain are you back?")
    await client.wait_for("turn_complete", answered + 1)
    text = "".join(e.text_delta.text for e in client.of_kind("text_delta"))
    assert text.endswith(MOCK_TEXT)
    assert supervisor.pid == afresh_pid
    assert "marker-unsaved" not in conversation_sent_with(mock_api, "are you back?")
    assert started.session.claude_session_id == claude_session_id
