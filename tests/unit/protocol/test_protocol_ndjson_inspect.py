"""`betcode ndjson inspect FILE [--json]` (issue 2 §5), via CliRunner and as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from betcode.cli.main import cli

MIB = 1024 * 1024
BIG_LINE = json.dumps(
    {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x" * (MIB + 500)}],
        },
    }
).encode()

TRANSCRIPT = b"\n".join(
    [
        b'{"type":"control_response","response":{"subtype":"success","request_id":"init_1","response":{}}}',
        b'{"type":"system","subtype":"init","session_id":"s1","tools":["Bash"],"model":"claude-opus-5-5"}',
        b'{"type":"system","subtype":"status","status":"requesting","session_id":"s1"}',
        b"",
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}}',
        b'{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}',
        b'{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{}}}',
        b'{"type":"control_cancel_request","request_id":"r1"}',
        b"   ",
        b"this is not json",
        b'{"type":"user","x":"\xff"}',
        b"[1,2]",
        BIG_LINE,
        b'{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":2}',
        b'{"type":"keep_alive"}',
        b'{"type":"tool_progress","progress":1}',
    ]
)  # no newline after the last line: it is read at EOF

EXPECTED_KINDS = [
    {"kind": "control_response"},
    {"kind": "system_init"},
    {"kind": "system", "subtype": "status"},
    {"kind": "stream_event"},
    {"kind": "assistant"},
    {"kind": "control_request", "subtype": "can_use_tool"},
    {"kind": "control_cancel_request"},
    {"kind": "user"},
    {"kind": "result", "subtype": "error_during_execution", "is_error": True},
    {"kind": "keep_alive"},
    {"kind": "unknown", "type": "tool_progress"},
]
EXPECTED_SUMMARY = {
    "lines": 14,
    "by_kind": {
        "control_response": 1,
        "system_init": 1,
        "system": 1,
        "stream_event": 1,
        "assistant": 1,
        "control_request": 1,
        "control_cancel_request": 1,
        "user": 1,
        "result": 1,
        "keep_alive": 1,
        "unknown": 1,
    },
    "invalid": 3,
    "truncated": 1,
}


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "claude-stdout.ndjson"
    path.write_bytes(TRANSCRIPT)
    return path


def check_json_output(stdout: str) -> None:
    records = [json.loads(line) for line in stdout.splitlines()]
    *messages, last = records
    assert last == {"summary": EXPECTED_SUMMARY}
    assert len(messages) == len(EXPECTED_KINDS)
    for record, expected in zip(messages, EXPECTED_KINDS, strict=True):
        assert record | expected == record


def test_json_output(transcript: Path) -> None:
    result = CliRunner().invoke(
        cli, ["ndjson", "inspect", str(transcript), "--json", "--max-line-bytes", str(MIB)]
    )
    assert result.exit_code == 0, result.output
    check_json_output(result.stdout)


def test_text_output(transcript: Path) -> None:
    result = CliRunner().invoke(
        cli, ["ndjson", "inspect", str(transcript), "--max-line-bytes", str(MIB)]
    )
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[1].split()[0] == "system_init"
    assert lines[5].split()[:2] == ["control_request", "subtype=can_use_tool"]
    assert lines[-1].startswith("summary: 14 lines (control_response 1, system_init 1,")
    assert lines[-1].endswith("; 3 invalid, 1 truncated")


@pytest.mark.parametrize("target", ["missing.ndjson", "."])
def test_unreadable_file_exits_5(tmp_path: Path, target: str) -> None:
    result = CliRunner().invoke(cli, ["ndjson", "inspect", str(tmp_path / target)])
    assert result.exit_code == 5
    assert result.stdout == ""


def test_bad_payload_limit_is_a_usage_error(transcript: Path) -> None:
    result = CliRunner().invoke(
        cli, ["ndjson", "inspect", str(transcript), "--max-line-bytes", "10"]
    )
    assert result.exit_code == 5
    assert "1–100 MiB" in result.output


def betcode_executable() -> str:
    return str(Path(sys.executable).parent / "betcode")


def test_real_process_json(transcript: Path) -> None:
    done = subprocess.run(
        [
            betcode_executable(),
            "ndjson",
            "inspect",
            str(transcript),
            "--json",
            "--max-line-bytes",
            str(MIB),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    check_json_output(done.stdout)
    assert "skipped a line" in done.stderr  # the bad lines are reported, on stderr only


def test_real_process_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.ndjson"
    done = subprocess.run(
        [betcode_executable(), "ndjson", "inspect", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5
    assert f"cannot read {missing}" in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_file_without_read_permission_exits_5(transcript: Path) -> None:
    transcript.chmod(0)
    result = CliRunner().invoke(cli, ["ndjson", "inspect", str(transcript)])
    assert result.exit_code == 5
