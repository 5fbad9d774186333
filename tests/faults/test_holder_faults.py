"""Faults of the holder (claude/holder) provoked for real: a holder killed with kill -9 is a
claude crash (claude is killed, then resumed with --resume); a spool at its bound stops
reading claude's output and loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import psutil
from harness.conditions import until
from harness.fake_claude import FakeClaude, resume_id

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HeldClaude, HolderPlace, StdoutMark
from betcode.claude.holder.holder import PIPE_READ_BYTES
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.claude.supervisor import ClaudeSupervisor, Holding, SupervisorState
from betcode.protocol.framing import Line

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
FLOOD_UUID = b"00000000-0000-4000-9000-"  # how the fake numbers its flood lines
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


class Hooks:
    """What a session gives its supervisor; acknowledges every batch as a commit would."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.states: list[SupervisorState] = []
        self.claude_session_id: str | None = None

    def on_lines(self, lines: list[Line], mark: StdoutMark | None = None) -> None:
        self.lines.extend(lines)
        for line in lines:
            message = json.loads(line.data)
            if message.get("subtype") == "init":
                self.claude_session_id = message["session_id"]
        if mark is not None:
            mark.acknowledge(mark.ends[-1])

    def on_state(self, state: SupervisorState, detail: str) -> None:
        self.states.append(state)

    def resume_session_id(self) -> str | None:
        return self.claude_session_id

    def turn_in_progress(self) -> bool:
        return True

    def permission_pending(self) -> bool:
        return False

    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None:
        pass


async def test_kill9_of_a_holder_is_a_claude_crash_resumed_with_resume(tmp_path: Path) -> None:
    fake = FakeClaude(tmp_path)
    slow = {"turns": [[{"do": "flood", "lines": 100_000, "text": "s", "rate": 200}]]}
    binary = fake.binary([slow, {"turns": [[{"do": "text", "text": "back"}]]}])
    hooks = Hooks()
    supervisor = ClaudeSupervisor(
        ClaudeBinary(binary, BinarySource.FLAG),
        tmp_path,
        lambda: {**ENV, "HOME": str(tmp_path)},
        FAST,
        hooks,
        holding=Holding(HolderPlace(tmp_path / "holders"), "s1"),
    )
    try:
        await supervisor.send(USER_LINE)
        await until(lambda: len(hooks.lines) > 20)
        [first] = list((tmp_path / "holders").iterdir())
        facts = json.loads((first / "holder.json").read_text())
        claude = psutil.Process(facts["claude_pid"])

        os.kill(facts["holder_pid"], signal.SIGKILL)
        # claude must not outlive its holder: it is killed, then a new one resumes.
        await until(lambda: not claude.is_running() or claude.status() == psutil.STATUS_ZOMBIE)
        await until(lambda: len(fake.starts()) == 2 and supervisor.state is SupervisorState.RUNNING)
        assert SupervisorState.RESTARTING in hooks.states
        first_start, second_start = fake.starts()
        assert resume_id(first_start) is None
        assert resume_id(second_start) == hooks.claude_session_id
        assert supervisor.pid != facts["claude_pid"]
    finally:
        await supervisor.stop()


async def test_at_its_spool_bound_the_holder_stops_reading_and_loses_nothing(
    tmp_path: Path,
) -> None:
    limit = 256 * 1024
    lines_out = 20_000  # about 4 MB of output: sixteen times the bound
    fake = FakeClaude(tmp_path)
    binary = fake.binary([{"turns": [[{"do": "flood", "lines": lines_out, "text": "b"}]]}])
    received: list[Line] = []
    marks: list[StdoutMark] = []
    acknowledging = False

    def on_lines(lines: list[Line], mark: StdoutMark) -> None:
        received.extend(lines)
        marks.append(mark)
        if acknowledging:
            mark.acknowledge(mark.ends[-1])

    place = HolderPlace(tmp_path / "holders", spool_limit_bytes=limit)
    process = HeldClaude(on_lines, place, "s1")
    await process.start([str(binary), "-p"], tmp_path, {**ENV, "HOME": str(tmp_path)})
    try:
        await process.write(USER_LINE)
        # Nothing acknowledged: the holder takes in the bound (plus one read), then stops;
        # claude is left waiting in its write, its flood unfinished.
        await until(lambda: bool(marks) and marks[-1].ends[-1] >= limit)
        await asyncio.sleep(1.0)  # room for more to arrive, were the bound not kept
        taken = marks[-1].ends[-1]
        assert limit <= taken <= limit + PIPE_READ_BYTES
        spool = tmp_path / "holders" / process.holder_id / "spool"
        assert sum(f.stat().st_size for f in spool.iterdir()) <= limit * 1.25 + PIPE_READ_BYTES
        assert not any(b'"type":"result"' in line.data for line in received)
        assert process.returncode is None

        acknowledging = True
        marks[-1].acknowledge(taken)
        await until(lambda: any(b'"type":"result"' in line.data for line in received), 60)
        floods = [json.loads(line.data) for line in received if FLOOD_UUID in line.data]
        numbers = [int(message["uuid"].rsplit("-", 1)[1]) for message in floods]
        assert numbers == list(range(lines_out))  # every line, once, in order
    finally:
        process.close_stdin()
        await process.terminate(2.0)
