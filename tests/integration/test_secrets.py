"""No secret in telemetry: a fake API key in the daemon's environment
appears nowhere in the data dir, the log, the metrics or the spans; a key in a prompt and one in
a tool input appear in no log line, metric, span or audit row, after a real turn (pinned CLI,
mock model) with trace logging (every raw NDJSON line), metrics and traces on. The conversation
itself is stored verbatim for replay, so the database holds the prompt's own words (checked)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.request
from pathlib import Path

import pytest
from harness.daemon import Client, DaemonProcess, Decision, daemon_process_env
from harness.environment import Workspace
from harness.otlp import grpc_receiver

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

ENV_KEY = "sk-ant-api03-ENVplantedKEY0123456789abcdefABCDEF"
PROMPT_KEY = "sk-ant-api03-PROMPTplantedKEY0123456789abcdefAB"
TOOL_KEY = "ghp_TOOLplantedTOKEN0123456789abcdefABCD"
COMMAND = f"python3 -c \"print('{TOOL_KEY}'[:3])\""
PROMPT = f"SCN:tool_bash {json.dumps({'command': COMMAND})} my key is {PROMPT_KEY}, run it"


def files_holding(root: Path, secret: str) -> list[Path]:
    needle = secret.encode()
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


async def test_planted_secrets_reach_no_log_metric_span_or_audit_row(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    env = daemon_process_env(
        tmp_path, claude_bin, workspace.env(mock_api.base_url, {"ANTHROPIC_API_KEY": ENV_KEY})
    )
    async with grpc_receiver() as (endpoint, received):
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_BSP_SCHEDULE_DELAY="100", BETCODE_LOG_LEVEL="trace",
        )  # fmt: skip
        daemon = DaemonProcess(tmp_path, env, args=("--metrics", "127.0.0.1:0"))
        await asyncio.to_thread(daemon.start)
        client = Client(daemon.socket, "planter")
        try:
            client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
            await client.wait_for("session_info")
            client.say(PROMPT)
            request = (await client.wait_for("permission_request")).permission_request
            client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
            result = (await client.wait_for("tool_call_result")).tool_call_result
            assert result.output.strip() == "ghp"  # the tool really ran with the key
            await client.wait_for("turn_complete")
            metrics = await asyncio.to_thread(scrape, daemon.log_path)
        finally:
            await client.close()
            await asyncio.to_thread(daemon.stop)  # exports the buffered spans
        spans = b"".join(span.SerializeToString() for span in received.spans)
    assert received.named("turn")

    log = daemon.log_path.read_text()
    audit = audit_rows(tmp_path / "data" / "daemon.db")
    (grant,) = [row for row in audit if row["event_type"] == "permission_grant"]
    assert "[REDACTED]" in str(grant["tool_input_preview"])  # the key was there, and cut
    assert log.count("[REDACTED]") >= 2  # raw lines held both keys: they were seen, and cut
    for secret in (ENV_KEY, PROMPT_KEY, TOOL_KEY):
        assert secret not in log
        assert secret not in metrics
        assert secret.encode() not in spans
        assert not [row for row in audit if secret in json.dumps(row)]
    assert files_holding(tmp_path / "data", ENV_KEY) == []
    # The conversation record is verbatim (replay): the prompt's key is in the database.
    assert files_holding(tmp_path / "data", PROMPT_KEY)


def scrape(log_path: Path) -> str:
    for line in log_path.read_text().splitlines():
        message = json.loads(line)["message"]
        if message.startswith("metrics at "):
            with urllib.request.urlopen(message.removeprefix("metrics at "), timeout=10) as r:
                body: bytes = r.read()
                return body.decode()
    raise AssertionError("no metrics address in the log")


def audit_rows(db: Path) -> list[dict[str, object]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute("SELECT * FROM audit_log")]
    finally:
        conn.close()
