"""Faults of the holder (claude/holder) provoked for real: a holder killed with kill -9 is a
claude crash (claude is killed, then resumed with --resume); a spool at its bound stops
reading claude's output and loses nothing; a holder left without a daemon for too long ends
claude (or, if it exited, just leaves) and leaves its output for the next daemon; a holder of
another protocol is stopped."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from harness.conditions import until
from harness.fake_claude import FakeClaude, resume_id

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HeldClaude, HolderPlace, StdoutMark, kill_group
from betcode.claude.holder.discovery import find_holders
from betcode.claude.holder.holder import EXIT_RECORD, PIPE_READ_BYTES, PROTOCOL
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

    def on_conversation_lost(self, claude_session_id: str) -> None:
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


class Received:
    """What a daemon side took of a held claude: every line, each batch committed at once."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.committed = 0

    def on_lines(self, lines: list[Line], mark: StdoutMark) -> None:
        self.lines.extend(lines)
        self.committed = mark.ends[-1]
        mark.acknowledge(self.committed)

    def flood_numbers(self) -> list[int]:
        floods = [json.loads(line.data) for line in self.lines if FLOOD_UUID in line.data]
        return [int(message["uuid"].rsplit("-", 1)[1]) for message in floods]


def endless_flood(fake: FakeClaude, tmp_path: Path, **run: object) -> Path:
    never = str(tmp_path / "never")  # the flood goes on until claude is ended
    flood = {"do": "flood", "lines": 0, "text": "u", "rate": 100, "until_file": never}
    return fake.binary([{**run, "turns": [[flood]]}])


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_claude_and_its_children_do_not_outlive_a_holder_killed_with_no_daemon(
    tmp_path: Path,
) -> None:
    """The daemon is gone and then the holder is SIGKILLed while claude waits on a permission.
    claude does not exit on stdin EOF while it waits (neither does this fake), so without a
    guard it lived on for ever, with the tools it had started."""
    fake = FakeClaude(tmp_path)
    child_pid_file = tmp_path / "tool.pid"
    turn = [
        {"do": "grandchild", "seconds": 300, "pid_file": str(child_pid_file)},
        {"do": "permission", "tool_name": "Bash", "input": {"command": "true"}},
    ]
    binary = fake.binary([{"turns": [turn]}])
    received = Received()
    process = HeldClaude(received.on_lines, HolderPlace(tmp_path / "holders"), "s1")
    await process.start([str(binary), "-p"], tmp_path, {**ENV, "HOME": str(tmp_path)})
    await process.write(USER_LINE)
    await until(lambda: any(b'"can_use_tool"' in line.data for line in received.lines))
    holder, claude = psutil.Process(process.holder_pid), psutil.Process(process.pid)
    tool = psutil.Process(int(child_pid_file.read_text()))
    process.detach()  # the daemon went away: nobody else will kill claude's group
    try:
        holder.kill()
        await until(lambda: gone(holder), within_s=10)
        await until(lambda: gone(claude) and gone(tool), within_s=10)
    finally:
        kill_group(claude.pid)


async def test_a_holder_without_a_daemon_for_too_long_ends_claude_and_keeps_its_output(
    tmp_path: Path,
) -> None:
    fake = FakeClaude(tmp_path)
    binary = endless_flood(fake, tmp_path)
    place = HolderPlace(tmp_path / "holders", unattended_seconds=1.0, kill_grace_seconds=5.0)
    first = Received()
    process = HeldClaude(first.on_lines, place, "s1")
    await process.start([str(binary), "-p"], tmp_path, {**ENV, "HOME": str(tmp_path)})
    await process.write(USER_LINE)
    await until(lambda: len(first.lines) > 10)
    holder, claude = psutil.Process(process.holder_pid), psutil.Process(process.pid)
    directory = place.root / process.holder_id
    process.detach()  # the daemon goes away; claude floods on into the spool

    # No daemon came back in time: claude got SIGTERM, the holder left its output and exit.
    await until(lambda: not holder.is_running(), within_s=30)
    assert not claude.is_running()
    record = json.loads((directory / EXIT_RECORD).read_text())
    assert record["returncode"] == -signal.SIGTERM
    assert record["end"] > first.committed  # printed while no daemon was attached

    # The next daemon finds it, has it replayed and takes the rest, once, then it is gone.
    [found] = await find_holders(place)
    assert found.session_id == "s1"
    assert found.link.claude_exited
    rest = Received()
    again = HeldClaude(rest.on_lines, place, "s1")
    again.adopt(found.link, first.committed)
    assert await again.wait() == -signal.SIGTERM
    numbers = first.flood_numbers() + rest.flood_numbers()
    assert numbers == list(range(len(numbers)))
    assert rest.committed == record["end"]
    await until(lambda: not directory.exists())
    assert len(fake.starts()) == 1


async def test_a_holder_whose_claude_exited_with_no_daemon_leaves_after_the_limit(
    tmp_path: Path,
) -> None:
    """It does not wait for ever for a daemon: claude's output and status stay on disk for
    the next daemon, which gets them as from a holder still running."""
    fake = FakeClaude(tmp_path)
    turn = [
        {"do": "text", "text": "before"},
        {"do": "sleep", "seconds": 0.3},
        {"do": "text", "text": "after"},
        {"do": "exit", "code": 3},
    ]
    binary = fake.binary([{"turns": [turn]}])
    place = HolderPlace(tmp_path / "holders", unattended_seconds=1.0)
    first = Received()
    process = HeldClaude(first.on_lines, place, "s1")
    await process.start([str(binary), "-p"], tmp_path, {**ENV, "HOME": str(tmp_path)})
    await process.write(USER_LINE)
    await until(lambda: any(b"before" in line.data for line in first.lines))
    holder = psutil.Process(process.holder_pid)
    directory = place.root / process.holder_id
    process.detach()

    await until(lambda: not holder.is_running(), within_s=30)
    record = json.loads((directory / EXIT_RECORD).read_text())
    assert record["returncode"] == 3  # exited by itself, not ended
    [found] = await find_holders(place)
    rest = Received()
    again = HeldClaude(rest.on_lines, place, "s1")
    again.adopt(found.link, first.committed)
    assert await again.wait() == 3
    assert any(b"after" in line.data for line in rest.lines)
    assert not any(b"after" in line.data for line in first.lines)
    await until(lambda: not directory.exists())


async def test_an_unattended_claude_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path,
) -> None:
    fake = FakeClaude(tmp_path)
    binary = endless_flood(fake, tmp_path, ignore_sigterm=True)
    place = HolderPlace(tmp_path / "holders", unattended_seconds=0.5, kill_grace_seconds=0.5)
    received = Received()
    process = HeldClaude(received.on_lines, place, "s1")
    await process.start([str(binary), "-p"], tmp_path, {**ENV, "HOME": str(tmp_path)})
    await process.write(USER_LINE)
    await until(lambda: bool(received.lines))
    holder = psutil.Process(process.holder_pid)
    directory = place.root / process.holder_id
    process.detach()

    await until(lambda: not holder.is_running(), within_s=30)
    record = json.loads((directory / EXIT_RECORD).read_text())
    assert record["returncode"] == -signal.SIGKILL
    assert "fake claude: ignoring SIGTERM" in record["stderr"]  # SIGTERM came first
    [found] = await find_holders(place)
    found.abandon()  # its session is gone: the replay stops, the folder goes
    assert not directory.exists()


async def test_a_left_holder_that_cannot_be_replayed_is_removed_sparing_its_old_claude_pid(
    tmp_path: Path,
) -> None:
    """Its claude ended (exit.json says so), maybe days ago: a process group leader that has
    its pid now is someone else's and is left alone."""
    directory = tmp_path / "holders" / "1eft1eft"
    (directory / "spool").mkdir(parents=True)
    (directory / "spool" / f"{0:020d}").write_bytes(b"{}\n")  # 3 bytes, not the 9 recorded
    (directory / EXIT_RECORD).write_text(json.dumps({"returncode": 0, "end": 9, "limit": 1 << 21}))
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)  # noqa: ASYNC220
    try:
        facts = {"session_id": "s1", "holder_pid": 1, "claude_pid": other.pid, "started_at": 0.0}
        (directory / "holder.json").write_text(json.dumps(facts))

        assert await find_holders(HolderPlace(tmp_path / "holders")) == []
        assert not directory.exists()
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


async def stand_in_holder(
    directory: Path, serve: str, claude: subprocess.Popen[bytes]
) -> subprocess.Popen[str]:
    """A process in the place of session s1's holder of ``claude``: Python ``serve``, given the
    holder's socket path and claude's pid, prints "listening" once it listens there. Returned
    then, not once the socket file exists: bound but not yet listening, a connection is
    refused, which a daemon takes for a holder gone."""
    holder = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-c", serve, str(directory / "sock"), str(claude.pid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        facts = {"session_id": "s1", "holder_pid": holder.pid, "claude_pid": claude.pid}
        (directory / "holder.json").write_text(json.dumps({**facts, "started_at": 0.0}))
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "listening\n"
    except BaseException:
        holder.kill()
        holder.wait()
        raise
    return holder


async def test_a_holder_of_another_protocol_is_stopped_with_its_claude(tmp_path: Path) -> None:
    """One left by an older BetCode (its HELLO has no protocol number): this daemon cannot
    speak to it, so it goes, with its claude, as after a crash (the session resumes)."""
    directory = tmp_path / "holders" / "0ld0ld00"
    directory.mkdir(parents=True)
    claude = subprocess.Popen(["sleep", "300"], start_new_session=True)  # noqa: ASYNC220
    serve_old_hello = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen();"
        "print('listening', flush=True); c, _ = s.accept(); c.sendall(b'HELLO 1 2 running\\n');"
        "c.recv(1)"
    )
    old = await stand_in_holder(directory, serve_old_hello, claude)
    try:
        assert await find_holders(HolderPlace(tmp_path / "holders")) == []
        assert await asyncio.to_thread(claude.wait, 10) == -signal.SIGKILL
        assert await asyncio.to_thread(old.wait, 10) == -signal.SIGKILL
        assert not directory.exists()
    finally:
        for child in (claude, old):
            child.kill()
            child.wait()


async def test_a_live_holder_that_greets_late_is_reached_not_taken_for_gone(
    tmp_path: Path,
) -> None:
    """A holder greets a daemon only once done with the one before (a killed daemon's last
    connection), which on a loaded machine takes time: one that greets after 6 s (more than the
    5 s a re-attaching daemon used to wait) is reached, its claude and folder left alone."""
    directory = tmp_path / "holders" / "s10w5l0w"
    directory.mkdir(parents=True)
    claude = subprocess.Popen(["sleep", "300"], start_new_session=True)  # noqa: ASYNC220
    serve_late_hello = (
        "import os, socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]);"
        "s.listen(); print('listening', flush=True); c, _ = s.accept(); time.sleep(6);"
        f"c.sendall(f'HELLO {PROTOCOL} {{os.getpid()}} {{sys.argv[2]}} running 4096\\n'.encode());"
        "c.recv(1)"
    )
    late = await stand_in_holder(directory, serve_late_hello, claude)
    try:
        [found] = await find_holders(HolderPlace(tmp_path / "holders"))
        assert (found.session_id, found.link.holder_pid) == ("s1", late.pid)
        assert (found.link.claude_pid, found.link.claude_exited) == (claude.pid, False)
        found.link.writer.close()
        assert claude.poll() is None
        assert directory.exists()
    finally:
        for child in (claude, late):
            child.kill()
            child.wait()
