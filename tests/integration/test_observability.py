"""Observability of a real daemon process running the pinned real CLI against the mock model:
JSON log lines, and a /metrics scrape after one turn with a tool call a client approves."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.daemon import Client, DaemonProcess, Decision, daemon_process_env
from harness.environment import Workspace
from prometheus_client.parser import text_string_to_metric_families

from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
ISO_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@dataclass
class Observed:
    daemon: DaemonProcess
    workspace: Workspace

    def log_records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.daemon.log_path.read_text().splitlines()]

    def metrics_url(self) -> str:
        for record in self.log_records():
            if record["message"].startswith("metrics at "):
                return str(record["message"].removeprefix("metrics at "))
        raise AssertionError("the daemon did not log its metrics address")

    async def scrape(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        """Every sample by name and labels, parsed by prometheus_client's own parser."""
        text = await asyncio.to_thread(_get, self.metrics_url())
        samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                samples.setdefault(sample.name, {})[labels] = sample.value
        return samples


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


@pytest.fixture
async def observed(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Observed]:
    env = daemon_process_env(tmp_path, claude_bin, workspace.env(mock_api.base_url))
    daemon = DaemonProcess(tmp_path, env, args=("--metrics", "127.0.0.1:0", "--log-format", "json"))
    await asyncio.to_thread(daemon.start)
    try:
        yield Observed(daemon, workspace)
    finally:
        await asyncio.to_thread(daemon.stop)


async def approved_tool_turn(observed: Observed) -> tuple[Client, str]:
    client = Client(observed.daemon.socket, "observer")
    client.converse(agent_pb2.StartConversation(working_directory=str(observed.workspace.repo)))
    await client.wait_for("session_info")
    client.say(TOOL_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    await client.wait_for("turn_complete")
    return client, request.request_id


async def test_one_real_turn_shows_in_metrics_and_json_logs(observed: Observed) -> None:
    client, request_id = await approved_tool_turn(observed)
    try:
        usage = client.of_kind("usage")[-1].usage
        samples = await observed.scrape()
        assert samples["betcode_turn_duration_seconds_count"][()] == 1
        assert samples["betcode_permission_decisions_total"][(("decision", "user_allow"),)] == 1
        waits = samples["betcode_permission_request_duration_seconds_count"]
        assert waits[(("decision", "user_allow"), ("tool_name", "Bash"))] == 1
        tokens = samples["betcode_tokens_total"]
        assert tokens[(("direction", "input"),)] == usage.input_tokens > 0
        assert tokens[(("direction", "output"),)] == usage.output_tokens > 0
        assert tokens[(("direction", "cache_read"),)] == usage.cache_read_tokens
        assert samples["betcode_cost_usd_total"][()] == pytest.approx(usage.cost_usd)
        assert samples["betcode_subprocess_spawns_total"][()] == 1
        assert samples["betcode_subprocess_spawn_duration_seconds_count"][(("outcome", "ok"),)] == 1
        # Every stdout line of claude the daemon stored, counted once.
        assert samples["betcode_messages_processed_total"][()] >= 10
        assert samples["betcode_sessions_active"][()] == 1
        assert samples["betcode_grpc_clients_connected"][()] == 1
        assert samples["betcode_clients_lagging"][()] == 0
        assert samples["betcode_writer_queue_depth"][()] >= 0
        assert (
            samples["betcode_sqlite_operation_duration_seconds_count"][(("operation", "append"),)]
            > 0
        )
        assert "betcode_sqlite_errors_total" not in samples  # no label seen: no error
        status = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "betcode.cli.main", "daemon", "status"],
            env=observed.daemon.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        for component in ("sqlite", "subprocess_pool", "memory", "buffers", "local_server"):
            assert f"  {component}: serving" in status.stdout
        assert "1 of 100 sessions in use" in status.stdout
    finally:
        await client.close()

    # `daemon logs` shows the records as text lines (the harness keeps its log beside data/).
    copy = observed.daemon.root / "logs-copy"
    copy.mkdir()
    shutil.copy(observed.daemon.log_path, copy / "daemon.log")
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "betcode.cli.main", "daemon", "logs", "-n", "500",
         "--data-dir", str(copy)],
        env=observed.daemon.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert not [line for line in shown.stdout.splitlines() if line.startswith("{")]
    assert "claude pid " in shown.stdout
    assert f"[session_id={client.session_id}]" in shown.stdout

    records = observed.log_records()  # every line parses as JSON
    assert records
    for record in records:
        assert {"timestamp", "level", "target", "message"} <= record.keys()
        assert record["level"] in ("ERROR", "WARN", "INFO", "DEBUG")
    assert all(re.fullmatch(ISO_MS, r["timestamp"]) for r in records)
    # What a session's own task logs carries its id (claude's start is logged by its supervisor).
    started = [r for r in records if r["message"].startswith("claude pid ")]
    assert started
    assert started[0]["target"] == "betcode.claude.supervisor"
    assert started[0].get("session_id") == client.session_id
    # The permission request's records carry its id.
    assert [r for r in records if r.get("request_id") == request_id]


def test_metrics_on_a_non_loopback_address_is_refused_with_65(tmp_path: Path) -> None:
    fake = make_fake_claude(tmp_path / "fake", {})
    env = daemon_process_env(tmp_path, fake, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    done = subprocess.run(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground",
         "--no-import", "--metrics", "0.0.0.0:9464"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == EXIT_CONFIG_INVALID, done.stderr
    assert "daemon.observability" in done.stderr
    assert "'0.0.0.0:9464' is not a loopback address" in done.stderr
    assert not (tmp_path / "sock" / "daemon.sock").exists()
