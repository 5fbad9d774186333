"""Lines for claude's stdin across daemon restarts (claude/holder): a user message or a permission
answer the daemon has taken reaches claude exactly once, whether claude had stopped reading,
the holder had stopped reading, or the daemon was killed with the line still in its hands."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil
from harness.conditions import until
from harness.fake_claude import FakeClaude
from harness.restarts import Restarts, betcode_argv

from betcode.claude.holder.client import stdin_key
from betcode.protocol import writer as stdin
from betcode.v1 import common_pb2

REQUEST = "0b8f4a52-4c0e-4a57-9d43-5f1c7c2f7a11"
# More than claude's stdin pipe and one read of it hold, and than the holder's socket holds.
BIG = "x" * 1_000_000


def ask_then_text(*before_asking: dict[str, Any]) -> dict[str, Any]:
    """A run whose first turn asks to run a tool (after `before_asking`), the next says a text."""
    ask = {"do": "permission", "tool_name": "Bash", "input": {"command": "echo once"}}
    return {
        "turns": [
            [*before_asking, {**ask, "request_id": REQUEST}],
            [{"do": "text", "text": "read your long message"}],
        ]
    }


def stored_user_lines(database: Path, session_id: str) -> int:
    with closing(sqlite3.connect(database)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ? AND direction = 'in' "
            "AND message_type = 'user'",
            (session_id,),
        ).fetchone()
    return int(count)


def answer_recorded(database: Path) -> bool:
    with closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT response_received FROM pending_permissions WHERE request_id = ?", (REQUEST,)
        ).fetchone()
    return row is not None and row[0] == 1


async def start_asking(restarts: Restarts, binary: Path) -> str:
    """A daemon, a session, a turn whose tool waits for permission; the session's id."""
    _, writer = await restarts.start_fake_session(binary)
    writer.say("run it")
    await writer.wait_for("permission_request")
    return writer.session_id


def assert_each_line_once(fake: FakeClaude) -> None:
    """claude read the answer and the long message once each, and ran the tool once."""
    read = fake.stdin_messages()
    answers = [m for m in read if m.get("type") == "control_response"]
    assert [m["response"]["request_id"] for m in answers] == [REQUEST]
    assert answers[0]["response"]["response"]["behavior"] == "allow"
    long_ones = [m for m in read if m.get("type") == "user" and m["message"]["content"] == BIG]
    assert len(long_ones) == 1
    assert len(fake.starts()) == 1  # the same claude all along


async def observe_both_turns(restarts: Restarts, session_id: str) -> list[str]:
    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", count=2, within_s=60)
    return [e.tool_call_result.output for e in observer.of_kind("tool_call_result")]


async def test_a_claude_that_stopped_reading_gets_each_line_once_across_a_daemon_kill(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    reading_again = tmp_path / "read-again"
    binary = fake.binary([ask_then_text({"do": "deaf", "until_file": str(reading_again)})])
    session_id = await start_asking(restarts, binary)
    daemon = restarts.daemon
    assert daemon is not None
    [holder] = restarts.holders()
    restarts.clients[0].say(BIG)  # claude does not read it: it waits in its holder
    await until(lambda: stored_user_lines(restarts.database, session_id) == 2)
    answered = await restarts.cli("permissions", "allow", REQUEST)
    assert answered.returncode == 0, answered.stderr

    await asyncio.to_thread(daemon.kill9)
    await asyncio.to_thread(daemon.start)  # the new daemon must reach the holder
    reading_again.touch()

    assert await observe_both_turns(restarts, session_id) == ["Bash ran"]
    assert_each_line_once(fake)
    assert psutil.Process(holder["claude_pid"]).is_running()


async def test_lines_a_killed_daemon_still_held_reach_claude_once(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    binary = fake.binary([ask_then_text()])
    session_id = await start_asking(restarts, binary)
    daemon = restarts.daemon
    assert daemon is not None
    [holder] = restarts.holders()
    # The holder stops reading (as one starved of CPU would): what its socket cannot take
    # stays in the daemon, the long message's tail and then the answer.
    os.kill(holder["holder_pid"], signal.SIGSTOP)
    try:
        restarts.clients[0].say(BIG)
        await until(lambda: stored_user_lines(restarts.database, session_id) == 2)
        answering = subprocess.Popen(  # noqa: ASYNC220 - waits in the daemon, killed below
            betcode_argv("permissions", "allow", REQUEST), env=daemon.env, stdout=subprocess.DEVNULL
        )
        await until(lambda: answer_recorded(restarts.database))
        await asyncio.to_thread(daemon.kill9)
        answering.kill()
        await asyncio.to_thread(answering.wait)
    finally:
        os.kill(holder["holder_pid"], signal.SIGCONT)
    await asyncio.to_thread(daemon.start)

    assert await observe_both_turns(restarts, session_id) == ["Bash ran"]
    assert_each_line_once(fake)


def request_committed(database: Path) -> bool:
    with closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT 1 FROM messages WHERE direction = 'out' AND message_type = 'control_request' "
            "AND payload LIKE ?",
            (f"%{REQUEST}%",),
        ).fetchone()
    return row is not None


async def killed_deciding(restarts: Restarts, fake: FakeClaude, tmp_path: Path) -> tuple[str, Path]:
    """A daemon killed after claude's request was committed and before anything decided it;
    (the session's id, the rules file: a FIFO nobody writes)."""
    ask = {"do": "permission", "tool_name": "Bash", "input": {"command": "echo once"}}
    binary = fake.binary([{"turns": [[{**ask, "request_id": REQUEST}]]}])
    _, writer = await restarts.start_fake_session(binary)
    daemon = restarts.daemon
    assert daemon is not None
    # The rules are read on the first request: from a FIFO nobody writes, reading them holds
    # that request (for the rule book's read timeout, 10 s) after it is committed and before
    # any answer is recorded.
    rules = tmp_path / "repo" / ".claude" / "settings.local.json"
    rules.parent.mkdir()
    os.mkfifo(rules)
    writer.say("run it")
    await until(lambda: request_committed(restarts.database))
    await asyncio.to_thread(daemon.kill9)
    return writer.session_id, rules


async def ran_once(restarts: Restarts, fake: FakeClaude, session_id: str) -> None:
    """claude got one answer, ran the tool once and ended its turn, the same claude all along."""
    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)
    assert [e.tool_call_result.output for e in observer.of_kind("tool_call_result")] == ["Bash ran"]
    answers = [m for m in fake.stdin_messages() if m.get("type") == "control_response"]
    assert [m["response"]["request_id"] for m in answers] == [REQUEST]
    assert len(fake.starts()) == 1


async def test_a_request_a_rule_allows_is_answered_once_after_a_daemon_killed_deciding_it(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    session_id, rules = await killed_deciding(restarts, fake, tmp_path)
    rules.unlink()
    rules.write_text(json.dumps({"permissions": {"allow": ["Bash(echo once)"]}}))
    assert restarts.daemon is not None
    await asyncio.to_thread(restarts.daemon.start)

    await ran_once(restarts, fake, session_id)


async def test_a_rules_file_that_never_ends_delays_startup_by_its_read_timeout_then_asks_the_user(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    session_id, _ = await killed_deciding(restarts, fake, tmp_path)
    assert restarts.daemon is not None
    # The request is decided again before serving: the FIFO, still unread, holds that up for
    # the read timeout only; no rules are known, so the user is asked.
    await asyncio.to_thread(restarts.daemon.start)
    listed = await restarts.cli("permissions", "pending")
    assert REQUEST in listed.stdout, listed

    answered = await restarts.cli("permissions", "allow", REQUEST)
    assert answered.returncode == 0, answered.stderr
    await ran_once(restarts, fake, session_id)


def journal_sent(database: Path) -> bool:
    """Every line journaled for claude's stdin was confirmed by its holder."""
    with closing(sqlite3.connect(database)) as db:
        (unsent,) = db.execute(
            "SELECT COUNT(*) FROM holder_stdin WHERE length(line) > 0"
        ).fetchone()
    return int(unsent) == 0


def dropped_by_holder(holder_dir: Path) -> list[str]:
    """The keys of the stdin lines the holder was sent again after taking them."""
    log = (holder_dir / "holder.log").read_text()
    return [
        line.split("stdin line ")[1].split()[0]
        for line in log.splitlines()
        if "taken before" in line
    ]


async def test_a_reattaching_daemon_sends_again_only_the_answers_never_journaled(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    asks = [
        {
            "do": "permission",
            "tool_name": "Bash",
            "input": {"command": f"echo {n}"},
            "request_id": n,
        }
        for n in ("r1", "r2", "r3")
    ]
    binary = fake.binary([{"turns": [asks]}])
    _, writer = await restarts.start_fake_session(binary)
    daemon = restarts.daemon
    assert daemon is not None
    writer.say("run them")
    for count, request_id in enumerate(("r1", "r2"), start=1):
        await writer.wait_for("permission_request", count=count)
        writer.answer(request_id, common_pb2.PermissionDecision.PERMISSION_DECISION_ALLOW_ONCE)
    await writer.wait_for("permission_request", count=3)  # r3 waits: r1 and r2 were taken
    await until(lambda: journal_sent(restarts.database))
    [holder] = restarts.holders()
    await asyncio.to_thread(daemon.kill9)
    # As if the daemon had died after logging r2's answer and before journaling it.
    r2_key = stdin_key(stdin.permission_allow("r2"))
    with closing(sqlite3.connect(restarts.database)) as db, db:
        db.execute("DELETE FROM holder_stdin WHERE key = ?", (r2_key,))
    await asyncio.to_thread(daemon.start)

    answered = await restarts.cli("permissions", "allow", "r3")
    assert answered.returncode == 0, answered.stderr
    observer = restarts.client("observer")
    observer.resume(writer.session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)

    # r1's answer was journaled and taken: not sent again; r2's, never journaled, was.
    assert dropped_by_holder(holder["dir"]) == [r2_key]
    answers = [m for m in fake.stdin_messages() if m.get("type") == "control_response"]
    assert [m["response"]["request_id"] for m in answers] == ["r1", "r2", "r3"]
    assert len(fake.starts()) == 1
