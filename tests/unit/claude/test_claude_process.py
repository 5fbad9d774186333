"""One claude child, for real: a fake claude subprocess driven by a script."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from betcode.claude.process import (
    STDERR_LINE_MAX_BYTES,
    STDERR_TAIL_LINES,
    ClaudeProcess,
    ClaudeStartError,
    ClaudeStdinClosed,
)
from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.framing import Line

USER_LINE = b'{"type":"user","message":{"role":"user","content":"hi"},"session_id":""}\n'
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


class Collected:
    def __init__(self) -> None:
        self.lines: list[Line] = []

    def __call__(self, batch: list[Line]) -> None:
        self.lines.extend(batch)

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(line.data) for line in self.lines]


async def _start(tmp_path: Path, script: dict[str, Any], collected: Collected) -> ClaudeProcess:
    binary = make_fake_claude(tmp_path / "fake", script)
    process = ClaudeProcess(collected)
    await process.start([str(binary), "-p", "--verbose"], tmp_path, ENV)
    return process


async def test_a_turn_goes_through_and_eof_ends_the_process(tmp_path: Path) -> None:
    collected = Collected()
    process = await _start(tmp_path, {"turns": [[{"do": "text", "text": "hello"}]]}, collected)
    await process.write(USER_LINE)
    process.close_stdin()
    assert await process.wait() == 0
    kinds = [message["type"] for message in collected.messages()]
    assert kinds == ["system", "assistant", "result"]
    assert collected.messages()[-1]["result"] == "hello"
    assert process.returncode == 0


async def test_garbage_and_oversized_lines_do_not_break_the_pump(tmp_path: Path) -> None:
    steps = [
        {"do": "raw", "text": "this is not json"},
        {"do": "raw", "hex": "fffe7b22626164223a"},
        {"do": "big_line", "bytes": 11 * 1024 * 1024},
        {"do": "text", "text": "still here"},
    ]
    collected = Collected()
    process = await _start(tmp_path, {"turns": [steps]}, collected)
    await process.write(USER_LINE)
    process.close_stdin()
    assert await process.wait() == 0
    datas = [line.data for line in collected.lines]
    assert b"this is not json" in datas
    assert bytes.fromhex("fffe7b22626164223a") in datas
    (big,) = [line for line in collected.lines if line.original_size > 10 * 1024 * 1024]
    assert big.truncated
    assert len(big.data) <= 10 * 1024 * 1024
    assert json.loads(big.data)["type"] == "assistant"  # cut, still valid JSON
    assert json.loads(collected.lines[-1].data)["result"] == "still here"


async def test_stderr_is_drained_and_its_tail_kept(tmp_path: Path) -> None:
    noise = [{"do": "stderr", "text": f"line {n}"} for n in range(STDERR_TAIL_LINES + 20)]
    endless = {"do": "stderr", "text": "x" * (STDERR_LINE_MAX_BYTES * 30)}
    steps = [*noise, endless, {"do": "stderr", "text": "fatal: boom"}, {"do": "exit", "code": 3}]
    process = await _start(tmp_path, {"startup": steps}, Collected())
    assert await process.wait() == 3
    tail = process.stderr_tail
    assert len(tail) == STDERR_TAIL_LINES
    assert tail[-1] == "fatal: boom"
    assert tail[-2] == "x" * STDERR_LINE_MAX_BYTES
    assert tail[0] == "line 22"


async def test_a_failing_line_consumer_does_not_stop_the_pump(tmp_path: Path) -> None:
    seen: list[Line] = []

    def consumer(batch: list[Line]) -> None:
        seen.extend(batch)
        raise RuntimeError("consumer bug")

    binary = make_fake_claude(tmp_path / "fake", {"turns": [[{"do": "text", "text": "a"}]]})
    process = ClaudeProcess(consumer)
    await process.start([str(binary), "--verbose"], tmp_path, ENV)
    await process.write(USER_LINE)
    process.close_stdin()
    assert await process.wait() == 0
    assert json.loads(seen[-1].data)["type"] == "result"


async def test_terminate_escalates_to_sigkill_for_a_process_ignoring_sigterm(
    tmp_path: Path,
) -> None:
    ready = {"do": "raw", "text": '{"ready":true}'}  # printed once SIGTERM is refused
    script = {"ignore_sigterm": True, "startup": [ready, {"do": "hang"}]}
    collected = Collected()
    process = await _start(tmp_path, script, collected)
    while not collected.lines:
        assert not await process.exited_within(0.01)
    assert await process.terminate(grace=0.3) == -signal.SIGKILL
    assert "fake claude: ignoring SIGTERM" in process.stderr_tail


async def test_terminate_stops_at_sigterm_when_it_is_honoured(tmp_path: Path) -> None:
    process = await _start(tmp_path, {"startup": [{"do": "hang"}]}, Collected())
    assert await process.terminate(grace=5.0) == -signal.SIGTERM


async def test_writing_to_an_exited_process_is_a_named_error(tmp_path: Path) -> None:
    process = await _start(tmp_path, {"startup": [{"do": "exit", "code": 0}]}, Collected())
    await process.wait()
    with pytest.raises(ClaudeStdinClosed, match="no longer accepts input"):
        await process.write(USER_LINE)


async def test_writing_after_close_stdin_is_a_named_error(tmp_path: Path) -> None:
    process = await _start(tmp_path, {}, Collected())
    process.close_stdin()
    with pytest.raises(ClaudeStdinClosed):
        await process.write(USER_LINE)
    assert await process.wait() == 0


async def test_partial_lines_are_refused(tmp_path: Path) -> None:
    process = await _start(tmp_path, {}, Collected())
    with pytest.raises(ValueError, match="end with a newline"):
        await process.write(b'{"type":"keep_alive"}')
    await process.terminate(grace=1.0)


async def test_a_missing_working_directory_is_a_clear_error(tmp_path: Path) -> None:
    process = ClaudeProcess(Collected())
    with pytest.raises(
        ClaudeStartError, match=r"working directory does not exist: .*gone; .*sessions move"
    ):
        await process.start(["/bin/true"], tmp_path / "gone", ENV)


async def test_a_binary_that_cannot_run_is_a_clear_error(tmp_path: Path) -> None:
    not_executable = tmp_path / "claude"
    not_executable.write_text("data")
    with pytest.raises(ClaudeStartError, match="cannot start claude"):
        await ClaudeProcess(Collected()).start([str(not_executable)], tmp_path, ENV)


async def test_a_flood_arrives_complete_and_in_order(tmp_path: Path) -> None:
    collected = Collected()
    flood = {"do": "flood", "lines": 50_000, "text": "tok"}
    process = await _start(tmp_path, {"turns": [[flood]]}, collected)
    await process.write(USER_LINE)
    process.close_stdin()
    assert await process.wait() == 0
    uuids = [m["uuid"] for m in collected.messages() if m["type"] == "stream_event"]
    assert uuids == [f"00000000-0000-4000-9000-{n:012d}" for n in range(50_000)]
