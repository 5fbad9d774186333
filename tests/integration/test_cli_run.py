"""`betcode run` as a user runs it: the real command in its own process, against a real daemon
on a Unix socket running the pinned real CLI and the mock model (a fake claude for the crash).
Every exit code of docs/CLI.md#exit-codes is provoked here or, for usage errors, in
tests/unit/cli/test_run_command.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import psutil
import pytest
from harness.cli_process import Finished, betcode, finish, spawn
from harness.conditions import until
from harness.daemon import (
    Client,
    DaemonProcess,
    InProcessDaemon,
    daemon_config,
    daemon_process_in,
)
from harness.environment import Workspace

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.mock_anthropic import MockAnthropic, Reply, ToolUseBlock
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

BASH_PROMPT = "SCN:tool_bash run it"
HELLO = "python3 -c \"print('hello-from-bash')\""
ALLOW_HINT = re.compile(r"betcode permissions allow (\S+)")
ANSWER_HINT = re.compile(r"betcode permissions answer (\S+)")


async def stderr_until(process: asyncio.subprocess.Process, pattern: re.Pattern[str]) -> str:
    """Reads the process's stderr until a line matches; returns the first group."""
    assert process.stderr is not None

    async def read() -> str:
        seen = []
        while line := (await process.stderr.readline()).decode():  # type: ignore[union-attr]
            seen.append(line)
            if match := pattern.search(line):
                return match.group(1)
        raise AssertionError(f"stderr ended without {pattern.pattern}: {''.join(seen)}")

    return await asyncio.wait_for(read(), 90)


async def test_run_streams_the_answer_continues_the_session_and_prints_json(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    first = await betcode(daemon.socket, repo, "run", "SCN:plain")
    assert (first.code, first.out) == (0, "Hello from the mock model.\n"), first.err

    prompt = b'SCN:plain {"text": "Second answer."}\n'
    second = await betcode(
        daemon.socket, repo, "run", "-", "--continue", "--output", "json", stdin=prompt
    )
    assert second.code == 0, second.err
    summary = json.loads(second.out)
    assert summary["text"] == "Second answer."
    assert (summary["denials"], summary["error"], summary["exit_code"]) == ([], None, 0)
    assert summary["usage"]["output_tokens"] > 0
    assert summary["cost_usd"] >= 0
    session_id = summary["session_id"]

    third = await betcode(
        daemon.socket,
        repo,
        "run",
        'SCN:plain {"text": "Third."}',
        "--session",
        session_id[:8],
        "--output",
        "stream-json",
    )
    assert third.code == 0, third.err
    lines = [json.loads(line) for line in third.out.splitlines()]
    kinds = [
        next(iter(set(line) - {"sequence", "timestamp", "parent_tool_use_id"}))
        for line in lines[:-1]
    ]
    assert kinds[0] == "user_input"  # the run's own turn only: no earlier history
    assert "text_delta" in kinds
    assert kinds[-1] == "turn_complete"
    result = lines[-1]["result"]
    assert (result["session_id"], result["text"]) == (session_id, "Third.")

    listed = await betcode(daemon.socket, repo, "sessions", "list", "--json")
    assert [s["id"] for s in json.loads(listed.out)] == [session_id]  # one session, continued


async def test_a_request_waits_until_allowed_from_another_terminal(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    running = await spawn(daemon.socket, repo, "run", BASH_PROMPT)
    request_id = await stderr_until(running, ALLOW_HINT)

    waiting = await betcode(daemon.socket, repo, "permissions", "pending", "--json")
    assert [row["request_id"] for row in json.loads(waiting.out)] == [request_id]
    allowed = await betcode(daemon.socket, repo, "permissions", "allow", request_id)
    assert (allowed.code, allowed.out.strip()) == (0, f"{request_id}: allowed")

    done = await finish(running)
    assert done.code == 0, done.err
    assert "hello-from-bash" in done.out
    # The run saw who answered (this user, from another terminal); it never answered itself.
    assert "allowed by you, in another terminal" in done.err


async def test_a_request_denied_from_another_terminal_exits_3(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    running = await spawn(daemon.socket, repo, "run", BASH_PROMPT, "--output", "json")
    request_id = await stderr_until(running, ALLOW_HINT)
    denied = await betcode(
        daemon.socket, repo, "permissions", "deny", request_id, "--message", "not today"
    )
    assert denied.code == 0

    done = await finish(running)
    assert done.code == 3, done.err
    [denial] = json.loads(done.out)["denials"]  # also in the TurnComplete: counted once
    assert denial.pop("tool_use_id").startswith("toolu_")
    assert denial == {
        "request_id": request_id,
        "tool_name": "Bash",
        "outcome": "denied",
        "message": "not today",
    }


@pytest.fixture
async def deny_rule_daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[InProcessDaemon]:
    """A daemon whose settings deny `Bash(python3:*)`: such calls are refused unasked."""
    config_dir = tmp_path / "daemon-config"
    config_dir.mkdir()
    rules = {"permissions": {"deny": ["Bash(python3:*)"]}}
    (config_dir / "settings.json").write_text(json.dumps(rules))
    environ = workspace.env(mock_api.base_url)
    config = daemon_config(tmp_path / "daemon", claude_bin, environ, config_dir=config_dir)
    running = Daemon(config)
    await running.start()
    try:
        yield InProcessDaemon(running, config)
    finally:
        await running.stop()


async def test_a_call_denied_by_a_daemon_rule_exits_3_and_is_listed(
    deny_rule_daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = deny_rule_daemon.socket, workspace.repo
    done = await betcode(socket, repo, "run", BASH_PROMPT, "--output", "json")
    assert done.code == 3, done.err
    summary = json.loads(done.out)
    [denial] = summary["denials"]
    assert denial.pop("tool_use_id").startswith("toolu_")
    assert denial.pop("message").startswith("Denied by rule: Bash(python3:*) (from ")
    assert denial == {"request_id": "", "tool_name": "Bash", "outcome": "denied"}  # none asked
    assert summary["exit_code"] == 3

    texted = await betcode(socket, repo, "run", BASH_PROMPT)
    assert texted.code == 3, texted.err
    assert f"denied: Bash: {HELLO} (Denied by rule: Bash(python3:*)" in texted.err


async def test_yes_and_a_matching_allow_rule_approve_without_waiting(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    with_yes = await betcode(daemon.socket, repo, "run", BASH_PROMPT, "--yes")
    assert with_yes.code == 0, with_yes.err
    assert "hello-from-bash" in with_yes.out
    assert "approved (--yes)" in with_yes.err

    ruled = await betcode(
        daemon.socket, repo, "run", BASH_PROMPT, "--allow", "Read", "--allow", "Bash(python3:*)"
    )
    assert ruled.code == 0, ruled.err
    assert "hello-from-bash" in ruled.out
    assert "approved (--allow Bash(python3:*))" in ruled.err


async def test_timeout_or_ctrl_c_leave_the_request_pending(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    # Ctrl-C: the run stops, its request stays pending.
    interrupted = await spawn(daemon.socket, repo, "run", BASH_PROMPT)
    request_id = await stderr_until(interrupted, ALLOW_HINT)
    interrupted.send_signal(signal.SIGINT)
    stopped = await finish(interrupted)
    assert stopped.code == 1
    [session_id] = re.findall(r"`betcode chat --session (\S+)` follows it", stopped.err)

    # --timeout: a run continuing that session is held up by the request (it was pending
    # before the run, so the timeout cannot pass first), says so, and leaves it pending.
    done = await betcode(
        daemon.socket, repo, "run", "--session", session_id, "and then?", "--timeout", "3"
    )
    assert done.code == 3, done.err
    assert "stays pending in the daemon" in done.err
    assert ALLOW_HINT.findall(done.err) == [request_id, request_id]  # when seen, at the end

    pending = await betcode(daemon.socket, repo, "permissions", "pending", "--json")
    [row] = json.loads(pending.out)
    assert (row["request_id"], row["tool_name"]) == (request_id, "Bash")  # not answered for us
    not_a_question = await betcode(daemon.socket, repo, "permissions", "answer", request_id, "x")
    assert not_a_question.code == 5
    assert "is a Bash request, not a question" in not_a_question.err


async def test_a_question_is_answered_from_the_cli_and_allow_refuses_it(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    running = await spawn(daemon.socket, repo, "run", 'SCN:ask {"questions": 2, "multi": true}')
    question_id = await stderr_until(running, ANSWER_HINT)

    refused = await betcode(daemon.socket, repo, "permissions", "allow", question_id)
    assert refused.code == 5
    assert f"betcode permissions answer {question_id} ANSWER" in refused.err
    listed = await betcode(daemon.socket, repo, "permissions", "pending")
    assert f"options and answers: betcode permissions answer {question_id}" in listed.out
    shown = await betcode(daemon.socket, repo, "permissions", "answer", question_id)
    assert shown.code == 0
    assert "Nothing was sent" in shown.out
    options = re.findall(r"^\s+\d\) (.+?)(?: — .*)?$", shown.out, re.MULTILINE)
    assert len(options) >= 4

    one_short = await betcode(daemon.socket, repo, "permissions", "answer", question_id, "1")
    assert one_short.code == 5
    assert "asks 2 question(s) but 1 answer(s) were given" in one_short.err
    answered = await betcode(daemon.socket, repo, "permissions", "answer", question_id, "1", "1,2")
    assert answered.code == 0, answered.err
    assert answered.out.startswith(f"{question_id}: answered")

    done = await finish(running)
    assert done.code == 0, done.err
    assert options[0] in done.out  # the mock model quotes the answers claude got
    again = await betcode(daemon.socket, repo, "permissions", "answer", question_id, "2", "2")
    assert again.code == 6
    assert f"no question {question_id} is waiting" in again.err


@pytest.fixture
async def no_retry_daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[InProcessDaemon]:
    """A daemon whose claude gives up on the first failed API call (no retries)."""
    environ = workspace.env(mock_api.base_url, {"CLAUDE_CODE_MAX_RETRIES": "0"})
    config = daemon_config(tmp_path / "daemon", claude_bin, environ)
    running = Daemon(config)
    await running.start()
    try:
        yield InProcessDaemon(running, config)
    finally:
        await running.stop()


async def test_rate_limit_exits_4_and_an_api_error_exits_1(
    no_retry_daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = no_retry_daemon.socket, workspace.repo
    limited = await betcode(socket, repo, "run", 'SCN:http_429 {"times": 1000}')
    assert limited.code == 4, limited.err
    assert re.search(
        r"^Error: Rate limit exceeded\. Retry after \d+ seconds\.$", limited.err, re.MULTILINE
    )

    failed = await betcode(socket, repo, "run", 'SCN:http_500 {"times": 1000}', "--output", "json")
    assert failed.code == 1, failed.err
    assert json.loads(failed.out)["error"]["code"] == "AGENT_ERROR"


async def test_unknown_session_exits_6_and_no_daemon_exits_2(
    daemon: InProcessDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    repo = workspace.repo
    unknown = await betcode(daemon.socket, repo, "run", "hello", "--session", "no-such-session")
    assert unknown.code == 6
    assert "no session 'no-such-session'" in unknown.err
    nothing_here = await betcode(daemon.socket, repo, "run", "hello", "--continue")
    assert nothing_here.code == 6
    assert "to continue" in nothing_here.err

    gone = await betcode(tmp_path / "nobody.sock", repo, "run", "hello")
    assert gone.code == 2
    assert "no daemon socket at" in gone.err


async def test_claude_crashing_mid_turn_exits_7(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(
        tmp_path / "fake",
        {"turns": [[{"do": "text", "text": "starting"}, {"do": "exit", "code": 3}]]},
    )
    config = DaemonConfig(
        data_dir=tmp_path / "data",
        socket_path=tmp_path / "sock" / "daemon.sock",
        claude_bin=str(fake),
        environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
        policy=SupervisorPolicy(backoff_initial=0.05, idle_reap_seconds=None),
    )
    daemon = Daemon(config)
    await daemon.start()
    try:
        crashed = await betcode(config.socket_path, repo, "run", "do something", "--output", "json")
    finally:
        await daemon.stop()
    assert crashed.code == 7, crashed.err
    summary = json.loads(crashed.out)
    assert summary["error"]["code"] == "SUBPROCESS_CRASHED"
    assert "exited with code 3" in summary["error"]["message"]


async def allowed_then_done(
    daemon: DaemonProcess, repo: Path, request_id: str, running: asyncio.subprocess.Process
) -> Finished:
    """Allows the run's request from another terminal after a restart; the run then ends
    well, the approved call having run in the restarted daemon."""
    allowed = await betcode(daemon.socket, repo, "permissions", "allow", request_id)
    assert allowed.code == 0, allowed.err
    done = await finish(running)
    assert done.code == 0, done.err
    assert "- ok: hello-from-bash" in done.out
    return done


async def test_a_waiting_run_outlives_kill_9_of_the_daemon_and_gets_its_answer(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = daemon_process_in(tmp_path, claude_bin, workspace.env(mock_api.base_url))
    await asyncio.to_thread(daemon.start)
    try:
        running = await spawn(daemon.socket, workspace.repo, "run", BASH_PROMPT)
        request_id = await stderr_until(running, ALLOW_HINT)
        # Its holder too (test_live_restore: a claude that survives under its holder). The
        # holder's guard takes claude with it; once all are gone, no dying claude can take the
        # reply queued next. Told later that the call was approved, the resumed session's
        # model makes it again.
        await asyncio.to_thread(lambda: daemon.kill9(holders_too=True))
        _, alive = await asyncio.to_thread(psutil.wait_procs, daemon.orphans, 30.0)
        assert not alive, alive
        mock_api.enqueue(Reply(blocks=(ToolUseBlock("Bash", {"command": HELLO}),)))
        daemon.socket.unlink()
        await asyncio.to_thread(daemon.start)

        done = await allowed_then_done(daemon, workspace.repo, request_id, running)
    finally:
        await asyncio.to_thread(daemon.stop)
    assert "lost the daemon" in done.err
    assert "reconnected to the daemon" in done.err
    assert done.err.count(f"betcode permissions allow {request_id}") == 0  # asked once, before


async def test_a_waiting_run_outlives_a_plain_daemon_stop_and_start(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    """A plain `daemon stop` stops claude on purpose: not a crash. The request stays
    answerable after the start (a resumed claude is told, and the call is allowed once), so
    the run keeps waiting for it and then finishes the work."""
    daemon = daemon_process_in(tmp_path, claude_bin, workspace.env(mock_api.base_url))
    await asyncio.to_thread(daemon.start)
    try:
        running = await spawn(daemon.socket, workspace.repo, "run", BASH_PROMPT)
        request_id = await stderr_until(running, ALLOW_HINT)
        assert await asyncio.to_thread(daemon.stop) == 0  # what `betcode daemon stop` sends
        # Told that the call was approved, the resumed claude's model makes it again.
        mock_api.enqueue(Reply(blocks=(ToolUseBlock("Bash", {"command": HELLO}),)))
        await asyncio.to_thread(daemon.start)

        waiting = await betcode(daemon.socket, workspace.repo, "permissions", "pending", "--json")
        assert [row["request_id"] for row in json.loads(waiting.out)] == [request_id]
        done = await allowed_then_done(daemon, workspace.repo, request_id, running)
    finally:
        await asyncio.to_thread(daemon.stop)
    assert "SUBPROCESS_CRASHED" not in done.err
    assert "DAEMON_STOPPED" in done.err


async def test_a_turn_cut_off_by_a_plain_daemon_stop_exits_2_not_as_a_crash(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(
        tmp_path / "fake",
        {"turns": [[{"do": "text", "text": "starting"}, {"do": "sleep", "seconds": 300}]]},
    )
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    daemon = daemon_process_in(tmp_path, fake, environ)
    await asyncio.to_thread(daemon.start)
    try:
        running = await spawn(daemon.socket, repo, "run", "do something", "--output", "json")
        await until(lambda: "starting" in sessions_text(daemon.root))
        assert await asyncio.to_thread(daemon.stop) == 0  # what `betcode daemon stop` sends
        await asyncio.to_thread(daemon.start)
        done = await finish(running)
    finally:
        await asyncio.to_thread(daemon.stop)
    assert done.code == 2, done.err
    error = json.loads(done.out)["error"]
    assert error["code"] == "DAEMON_STOPPED", error
    assert "send a message to continue" in error["message"]


def sessions_text(root: Path) -> str:
    """Every text claude said in the daemon's sessions so far (read from its database)."""
    with closing(sqlite3.connect(root / "data" / "daemon.db")) as db:
        rows = db.execute("SELECT payload FROM messages WHERE direction = 'out'").fetchall()
    return "".join(str(payload) for (payload,) in rows)


async def test_a_run_asks_for_the_input_lock_another_client_holds(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    config = daemon_config(
        tmp_path / "daemon",
        claude_bin,
        workspace.env(mock_api.base_url),
        sessions=SessionSettings(lock_transfer_seconds=0.5),
    )
    daemon = Daemon(config)
    await daemon.start()
    desk = Client(config.socket_path, "desk")
    try:
        first = await betcode(
            config.socket_path, workspace.repo, "run", "SCN:plain", "--output", "json"
        )
        session_id = json.loads(first.out)["session_id"]
        desk.converse(agent_pb2.StartConversation(session_id=session_id))
        seen = 1  # the history shows the first run holding the lock, then desk takes it
        while (await desk.wait_for("input_lock", seen)).input_lock.holder_client_id != "desk":
            seen += 1

        taken = await betcode(
            config.socket_path,
            workspace.repo,
            "run",
            'SCN:plain {"text": "Mine now."}',
            "--continue",
        )
    finally:
        await desk.close()
        await daemon.stop()
    assert (taken.code, taken.out) == (0, "Mine now.\n"), taken.err
    assert "desk holds the input lock of this session; asking for it" in taken.err
    assert "got the input lock" in taken.err
