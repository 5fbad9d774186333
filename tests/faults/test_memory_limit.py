"""daemon.limits.session_rss_mb with a fake claude that grows (docs/LIMITS.md): above the cap a
busy claude is flagged and left running; once idle it is stopped, and the next message resumes
its conversation with --resume."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from harness.fake_claude import resume_id
from test_daemon_faults import FakeWorld

from betcode.config.settings import DaemonSettings, LimitSettings
from betcode.limits.memory import MIB, process_tree_rss
from betcode.sessions.session import Session
from betcode.v1 import agent_pb2, common_pb2

GROWN_MB = 96
LIMIT_MB = 64
BUSY_SECONDS = 8.0  # the grown turn's pause, while it is checked and must only be flagged


def claude_pid(session: Session) -> int | None:
    return session.supervisor.pid


def test_a_process_tree_s_memory_counts_its_children() -> None:
    code = "x = bytearray(48 * 1024 * 1024); x[::4096] = b'1' * (len(x) // 4096); input()"
    alone = process_tree_rss(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while process_tree_rss(child.pid) < 40 * MIB and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_tree_rss(child.pid) >= 40 * MIB
        # This process's tree holds the child: its memory is counted with it.
        assert process_tree_rss(os.getpid()) >= alone + 40 * MIB - 8 * MIB
    finally:
        child.kill()
        child.wait()
    assert process_tree_rss(child.pid) == 0


async def test_an_idle_claude_above_the_cap_is_stopped_and_the_next_message_resumes_it(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    grown = {
        "turns": [
            [
                {"do": "grow", "mb": GROWN_MB},
                {"do": "sleep", "seconds": BUSY_SECONDS},
                {"do": "text", "text": "grown"},
            ]
        ]
    }
    resumed = {"turns": [[{"do": "text", "text": "resumed"}]]}
    settings = replace(DaemonSettings(), limits=LimitSettings(session_rss_mb=LIMIT_MB))
    async with world.daemon([grown, resumed], settings=settings) as daemon:
        assert daemon.core is not None
        memory = daemon.core.admission.memory
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("grow")
        session = daemon.core.sessions.live[0]
        # Busy above the cap: flagged, left running.
        for _ in range(int(BUSY_SECONDS * 10)):
            await memory.check_once()
            measured = memory.of(session.id)
            if measured is not None and measured.rss_bytes > GROWN_MB * MIB:
                break  # all grown (a check may come while it is still growing)
            await asyncio.sleep(0.1)
        assert measured is not None
        assert measured.over_limit, measured
        assert measured.rss_bytes > GROWN_MB * MIB
        pid = session.supervisor.pid
        assert session.turn_active
        assert pid is not None
        summaries = [agent_pb2.SessionSummary(id=session.id)]
        await daemon.core.admission.describe(summaries)
        assert summaries[0].over_rss_limit
        assert summaries[0].claude_rss_bytes == measured.rss_bytes

        await client.wait_for("turn_complete", within_s=60)
        assert claude_pid(session) == pid  # never cut mid-turn
        await memory.check_once()
        assert claude_pid(session) is None
        assert memory.of(session.id) is None
        assert memory.stopped == 1
        stopped = await client.wait_for_status(common_pb2.AgentStatus.AGENT_STATUS_IDLE)
        while "stopped while idle" not in stopped.status_change.message:
            stopped = await client.wait_for_status(
                common_pb2.AgentStatus.AGENT_STATUS_IDLE, stopped.sequence
            )
        assert (
            f"above daemon.limits.session_rss_mb ({LIMIT_MB} MB)" in stopped.status_change.message
        )

        client.say("go on")
        await client.wait_for("turn_complete", count=2, within_s=60)
        text = "".join(event.text_delta.text for event in client.of_kind("text_delta"))
        assert text.endswith("resumed")
        conversation = session.claude_session_id
    first, second = world.starts()
    assert resume_id(first) is None
    assert resume_id(second) == conversation
