"""Supervisor faults provoked for real with fake claude subprocesses: crashes, crash loops,
hangs, idle reaping, process groups; each supervisor a bulkhead."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness.conditions import until
from harness.fake_claude import FakeClaude, resume_id

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.environment import build_child_env
from betcode.claude.holder.client import StdoutMark
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.claude.process import ClaudeProcess, ClaudeStartError
from betcode.claude.supervisor import (
    NO_CONVERSATION,
    ClaudeSupervisor,
    SupervisorCrashed,
    SupervisorState,
)
from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.framing import Line

S = SupervisorState
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
USER_LINE = b'{"type":"user","message":{"role":"user","content":"hi"},"session_id":""}\n'
FAST = SupervisorPolicy(
    backoff_initial=0.02,
    backoff_max=0.1,
    max_crashes=5,
    window_seconds=60.0,
    watchdog_seconds=30.0,
    kill_grace_seconds=0.3,
    idle_reap_seconds=None,
)
TEXT_TURN = [{"do": "text", "text": "done"}]


class Session:
    """The hooks a session gives its supervisor, recording everything."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.states: list[tuple[SupervisorState, str]] = []
        self.exits: list[tuple[int, list[str]]] = []
        self.lost: list[str] = []  # conversations claude could not resume
        self.claude_session_id: str | None = None
        self.turn = False
        self.pending = False

    def on_lines(self, lines: list[Line], mark: StdoutMark | None = None) -> None:
        self.lines.extend(lines)
        for line in lines:
            message = json.loads(line.data)
            if message.get("subtype") == "init":
                self.claude_session_id = message["session_id"]
            if message.get("type") == "result":
                self.turn = False

    def on_state(self, state: SupervisorState, detail: str) -> None:
        self.states.append((state, detail))

    def resume_session_id(self) -> str | None:
        return self.claude_session_id

    def turn_in_progress(self) -> bool:
        return self.turn

    def permission_pending(self) -> bool:
        return self.pending

    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None:
        self.exits.append((returncode, stderr_tail))

    def on_conversation_lost(self, claude_session_id: str) -> None:
        self.lost.append(claude_session_id)

    def state_names(self) -> list[SupervisorState]:
        return [state for state, _ in self.states]

    def results(self) -> int:
        return sum(1 for line in self.lines if json.loads(line.data)["type"] == "result")


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.fake = FakeClaude(tmp_path)
        self.starts = self.fake.starts
        (tmp_path / "repo").mkdir()

    def supervisor(
        self, runs: list[dict[str, Any]], policy: SupervisorPolicy = FAST, name: str = "fake"
    ) -> tuple[ClaudeSupervisor, Session]:
        binary = self.fake.binary(runs, name)
        session = Session()
        parent = {**ENV, "HOME": str(self.tmp_path)}
        supervisor = ClaudeSupervisor(
            ClaudeBinary(binary, BinarySource.FLAG),
            self.tmp_path / "repo",
            lambda: build_child_env(parent, self.tmp_path / "scratch"),
            policy,
            session,
        )
        return supervisor, session


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def new_session_id(argv: list[str]) -> str | None:
    """The id a start gave a new conversation (`--session-id ID`)."""
    return argv[argv.index("--session-id") + 1] if "--session-id" in argv else None


async def dies(pid: int) -> bool:
    """Whether `pid` is dead (or a zombie) within a few seconds: SIGKILL is not instant."""
    for _ in range(500):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        await asyncio.sleep(0.01)
    return False


def _written_pid(pid_file: Path) -> int | None:
    text = pid_file.read_text() if pid_file.exists() else ""
    return int(text) if text else None


async def grandchild_of(process: ClaudeProcess | ClaudeSupervisor, pid_file: Path) -> int:
    """The pid of the `sleep` the fake claude started in its process group."""
    await until(lambda: _written_pid(pid_file) is not None)
    pid = _written_pid(pid_file)
    assert pid is not None
    assert os.getpgid(pid) == process.pid
    return pid


async def test_turns_run_on_one_process_and_stop_is_clean(world: World) -> None:
    supervisor, session = world.supervisor([{"turns": [TEXT_TURN]}])
    for expected in (1, 2):
        await supervisor.send(USER_LINE)
        await until(lambda expected=expected: session.results() == expected)  # type: ignore[misc]
    pid = supervisor.pid
    await supervisor.stop()
    assert supervisor.state is S.IDLE
    assert session.state_names() == [S.SPAWNING, S.RUNNING, S.STOPPING, S.IDLE]
    assert session.exits == [(0, [])]
    assert len(world.starts()) == 1
    assert pid is not None
    assert await dies(pid)


async def test_kill_9_mid_turn_respawns_with_resume(world: World) -> None:
    mid_turn = [{"do": "text", "text": "partial"}, {"do": "sleep", "seconds": 60}]
    supervisor, session = world.supervisor([{"turns": [mid_turn]}, {"turns": [TEXT_TURN]}])
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: session.claude_session_id is not None)
    first_pid = supervisor.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    await until(lambda: supervisor.state is S.RUNNING and supervisor.pid != first_pid)
    await until(lambda: len(world.starts()) == 2)
    assert S.RESTARTING in session.state_names()
    assert session.exits[0][0] == -signal.SIGKILL
    first, second = world.starts()
    assert resume_id(first) is None
    assert resume_id(second) == session.claude_session_id
    # The respawned process waits for input; the next message gets a normal turn.
    assert session.results() == 0
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: session.results() == 1)
    await supervisor.stop()


async def test_five_crashes_within_the_window_is_crashed(world: World) -> None:
    crash = {"startup": [{"do": "stderr", "text": "boom"}, {"do": "exit", "code": 2}]}
    supervisor, session = world.supervisor([crash])
    await supervisor.ensure_running()
    await until(lambda: supervisor.state is S.CRASHED)
    assert session.state_names().count(S.RESTARTING) == 4
    assert len(world.starts()) == 5
    state, detail = session.states[-1]
    assert state is S.CRASHED
    for fragment in ("exit code 2", "boom", "5 crashes within 60 s"):
        assert fragment in detail
    with pytest.raises(SupervisorCrashed, match="not restarted automatically"):
        await supervisor.send(USER_LINE)
    assert len(world.starts()) == 5
    supervisor.reset()
    assert supervisor.state is S.IDLE
    await supervisor.ensure_running()  # runs again (and crashes again) after a reset
    await until(lambda: len(world.starts()) == 6)
    await supervisor.stop()


async def test_a_conversation_claude_cannot_resume_is_started_anew_until_given_input(
    world: World,
) -> None:
    conversation = "0b6f4f4e-8d0c-4a53-9a55-3c1c2b1f7a10"
    not_found = [
        {"do": "stderr", "text": NO_CONVERSATION.format(conversation)},
        {"do": "exit", "code": 1},
    ]
    crash_at_once = [{"do": "exit", "code": 2}]
    crash_in_turn = [{"do": "kill"}]
    runs: list[dict[str, Any]] = [
        {"startup": not_found},
        {"startup": crash_at_once},
        {"turns": [crash_in_turn]},
        {"turns": [TEXT_TURN]},
    ]
    # Three crashes give up: the conversation not found must not count as one.
    supervisor, session = world.supervisor(runs, dataclasses.replace(FAST, max_crashes=3))
    session.claude_session_id = conversation
    await supervisor.ensure_running()
    await until(lambda: len(world.starts()) == 3 and supervisor.state is S.RUNNING)
    assert session.lost == [conversation]
    restarting = [detail for state, detail in session.states if state is S.RESTARTING]
    assert "starting a new conversation" in restarting[0]
    # Until it was given input, claude starts anew: a crash before that changes nothing.
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: len(world.starts()) == 4 and supervisor.state is S.RUNNING)
    await supervisor.send(USER_LINE)
    await until(lambda: session.results() == 1)
    starts = [(resume_id(argv), new_session_id(argv)) for argv in world.starts()]
    assert starts == [
        (conversation, None),
        (None, conversation),
        (None, conversation),
        (conversation, None),  # given input, claude saved the new conversation
    ]
    assert session.lost == [conversation]
    await supervisor.stop()


async def test_a_hung_claude_ignoring_sigterm_is_killed_and_restarted(world: World) -> None:
    policy = SupervisorPolicy(
        backoff_initial=0.02, watchdog_seconds=0.3, kill_grace_seconds=0.2, idle_reap_seconds=None
    )
    hung = {"ignore_sigterm": True, "turns": [[{"do": "text", "text": "a"}, {"do": "hang"}]]}
    supervisor, session = world.supervisor([hung, {"turns": [TEXT_TURN]}], policy)
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: len(world.starts()) == 2 and supervisor.state is S.RUNNING)
    ((returncode, stderr_tail),) = session.exits
    assert returncode == -signal.SIGKILL
    assert "fake claude: ignoring SIGTERM" in stderr_tail  # SIGTERM first, then SIGKILL
    restarting = [detail for state, detail in session.states if state is S.RESTARTING]
    assert len(restarting) == 1
    assert "no output for" in restarting[0]
    assert resume_id(world.starts()[1]) == session.claude_session_id
    session.turn = False
    await supervisor.stop()


GRACEFUL_CLAUDE = """#!/bin/sh
# A claude that answers SIGTERM by exiting 0, and goes silent after its init line (until
# the end of its input).
trap 'exit 0' TERM
echo "$@" >> "$0.starts"
read -r line
echo '{"type":"system","subtype":"init","session_id":"6f1c2d3e-0000-4000-8000-000000000001"}'
while read -r line; do :; done
"""


def graceful_claude(directory: Path) -> tuple[Path, Callable[[], list[list[str]]]]:
    """The script above as a binary, and a reader of the argv of its starts."""
    binary = directory / "graceful-claude"
    binary.write_text(GRACEFUL_CLAUDE)
    binary.chmod(0o755)
    log = directory / "graceful-claude.starts"
    return binary, lambda: [line.split() for line in log.read_text().splitlines()]


async def test_a_watchdog_kill_that_exits_0_is_still_a_crash_and_resumes(
    world: World, tmp_path: Path
) -> None:
    policy = SupervisorPolicy(
        backoff_initial=0.02, watchdog_seconds=0.3, kill_grace_seconds=2.0, idle_reap_seconds=None
    )
    binary, starts = graceful_claude(tmp_path)
    supervisor, session = world.supervisor([], policy)
    supervisor.binary = ClaudeBinary(binary, BinarySource.FLAG)
    session.turn = True  # and it stays so: the session never hears the turn end
    await supervisor.send(USER_LINE)
    await until(lambda: len(session.exits) == 1 and supervisor.state is S.RUNNING)
    assert session.exits[0][0] == 0  # SIGTERM was honoured...
    restarting = [detail for state, detail in session.states if state is S.RESTARTING]
    assert len(restarting) == 1  # ...and the kill still counts as a crash
    assert "no output for" in restarting[0]
    first, second = starts()
    assert (resume_id(first), resume_id(second)) == (None, "6f1c2d3e-0000-4000-8000-000000000001")
    # The respawned process was given no input: it runs no turn, so its silence is no fault.
    resumed_pid = supervisor.pid
    await asyncio.sleep(4 * policy.watchdog_seconds)
    assert (supervisor.pid, supervisor.state, len(session.exits)) == (resumed_pid, S.RUNNING, 1)
    await supervisor.send(USER_LINE)  # a turn for this process: now silence counts again
    await until(lambda: len(session.exits) == 2)
    session.turn = False
    await supervisor.stop()


async def test_the_watchdog_waits_while_a_permission_is_pending(world: World) -> None:
    policy = SupervisorPolicy(watchdog_seconds=0.2, kill_grace_seconds=0.2, idle_reap_seconds=None)
    asking = {"turns": [[{"do": "permission", "tool_name": "Bash", "input": {"command": "ls"}}]]}
    supervisor, session = world.supervisor([asking, {}], policy)
    session.turn = session.pending = True
    await supervisor.send(USER_LINE)
    await until(lambda: any(b"can_use_tool" in line.data for line in session.lines))
    first_pid = supervisor.pid
    await asyncio.sleep(1.0)  # five watchdog periods of silence, all with a human to answer
    assert (supervisor.pid, supervisor.state, session.exits) == (first_pid, S.RUNNING, [])
    session.pending = False  # nobody is asked any more: now the silence counts
    await until(lambda: len(session.exits) == 1)
    await until(lambda: supervisor.state is S.RUNNING)
    assert supervisor.pid != first_pid
    session.turn = False
    await supervisor.stop()


async def test_idle_processes_are_reaped_and_the_next_message_resumes(world: World) -> None:
    policy = SupervisorPolicy(idle_reap_seconds=0.3, kill_grace_seconds=1.0)
    supervisor, session = world.supervisor([{"turns": [TEXT_TURN]}], policy)
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: session.results() == 1)  # the result ends the turn (session.turn)
    await until(lambda: supervisor.state is S.IDLE)
    assert session.state_names()[-2:] == [S.STOPPING, S.IDLE]
    assert session.exits == [(0, [])]
    session.turn = True
    await supervisor.send(USER_LINE)
    await until(lambda: session.results() == 2)
    first, second = world.starts()
    assert resume_id(first) is None
    assert resume_id(second) == session.claude_session_id
    await supervisor.stop()


async def test_a_requested_stop_is_never_a_crash(world: World) -> None:
    # An interrupted turn makes the CLI exit 1 at EOF: still a clean stop, not a restart.
    interruptible = {"turns": [[{"do": "sleep", "seconds": 0.5}, {"do": "text", "text": "x"}]]}
    supervisor, session = world.supervisor([interruptible])
    await supervisor.send(USER_LINE)
    await until(lambda: session.claude_session_id is not None)  # the turn has started
    await supervisor.send(
        b'{"type":"control_request","request_id":"c1","request":{"subtype":"interrupt"}}\n'
    )
    await until(lambda: session.results() == 1)
    await supervisor.stop()
    assert session.exits == [(1, [])]
    assert supervisor.state is S.IDLE
    assert S.RESTARTING not in session.state_names()


async def test_stop_during_a_turn_terminates_the_process_group(world: World) -> None:
    pid_file = world.tmp_path / "grandchild.pid"
    tool = [{"do": "grandchild", "seconds": 300, "pid_file": str(pid_file)}, {"do": "hang"}]
    supervisor, session = world.supervisor([{"turns": [tool]}])
    session.turn = True
    await supervisor.send(USER_LINE)
    grandchild = await grandchild_of(supervisor, pid_file)
    await supervisor.stop()
    assert session.exits[0][0] == -signal.SIGTERM
    assert supervisor.state is S.IDLE
    assert await dies(grandchild)


async def test_sigkill_after_grace_reaches_the_whole_process_group(world: World) -> None:
    pid_file = world.tmp_path / "grandchild.pid"
    steps = [{"do": "grandchild", "seconds": 300, "pid_file": str(pid_file)}, {"do": "hang"}]
    binary = make_fake_claude(world.tmp_path / "fake", {"startup": steps, "ignore_sigterm": True})
    process = ClaudeProcess(lambda lines: None)
    await process.start([str(binary), "--verbose"], world.tmp_path, ENV)
    grandchild = await grandchild_of(process, pid_file)
    assert await process.terminate(grace=0.2) == -signal.SIGKILL
    assert await dies(grandchild)


async def test_kill_9_of_the_cli_alone_still_ends_it_and_its_orphans(world: World) -> None:
    # The grandchild inherits claude's stdout: a reader that waited for EOF would hang.
    pid_file = world.tmp_path / "grandchild.pid"
    steps = [{"do": "grandchild", "seconds": 300, "pid_file": str(pid_file)}, {"do": "hang"}]
    binary = make_fake_claude(world.tmp_path / "fake", {"startup": steps})
    process = ClaudeProcess(lambda lines: None)
    await process.start([str(binary), "--verbose"], world.tmp_path, ENV)
    grandchild = await grandchild_of(process, pid_file)
    os.kill(process.pid, signal.SIGKILL)
    assert await process.wait() == -signal.SIGKILL
    assert await dies(grandchild)


async def test_stop_while_waiting_to_restart_cancels_the_restart(world: World) -> None:
    policy = SupervisorPolicy(backoff_initial=30.0, backoff_max=30.0, idle_reap_seconds=None)
    supervisor, _ = world.supervisor([{"startup": [{"do": "exit", "code": 1}]}], policy)
    await supervisor.ensure_running()
    await until(lambda: supervisor.state is S.RESTARTING)
    await supervisor.stop()
    assert supervisor.state is S.IDLE
    assert len(world.starts()) == 1


async def test_a_missing_working_directory_refuses_to_spawn(world: World) -> None:
    supervisor, _ = world.supervisor([{}])
    supervisor.cwd = world.tmp_path / "deleted-worktree"
    with pytest.raises(ClaudeStartError, match="does not exist"):
        await supervisor.send(USER_LINE)
    assert supervisor.state is S.IDLE
    assert world.starts() == []


async def test_one_sessions_crash_loop_does_not_touch_another(world: World) -> None:
    crashing, _ = world.supervisor([{"startup": [{"do": "exit", "code": 9}]}], name="crashing")
    healthy, healthy_session = world.supervisor([{"turns": [TEXT_TURN]}], name="healthy")
    await healthy.ensure_running()
    healthy_pid = healthy.pid
    await crashing.ensure_running()
    await until(lambda: crashing.state is S.CRASHED)
    await healthy.send(USER_LINE)
    await until(lambda: healthy_session.results() == 1)
    assert (healthy.state, healthy.pid) == (S.RUNNING, healthy_pid)
    assert S.RESTARTING not in healthy_session.state_names()
    await healthy.stop()
