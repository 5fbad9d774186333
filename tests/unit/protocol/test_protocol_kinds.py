"""The one type-to-name map: every recorded line of the pinned CLI is stored under its own
top-level `type`, and named by its kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from betcode.protocol.kinds import message_kind, wire_type
from betcode.protocol.messages import SystemInit, Unknown
from betcode.protocol.reader import ProtocolReader
from betcode.sessions.line_types import INVALID_LINE, line_type

CONTRACTS = Path(__file__).parents[2] / "contracts" / "claude_code_2.1.330"
RECORDED_LINES = [
    line
    for path in sorted(CONTRACTS.glob("*.ndjson"))
    for line in path.read_bytes().splitlines()
    if line.strip()
]


def test_the_recordings_are_there() -> None:
    assert len(RECORDED_LINES) > 100


@pytest.mark.parametrize("line", RECORDED_LINES[:400])
def test_a_recorded_line_is_stored_under_its_own_type(line: bytes) -> None:
    message = ProtocolReader().decode(line)
    assert message is not None
    assert line_type(message) == wire_type(message) == json.loads(line)["type"]


def test_kinds_tell_init_apart_and_fold_cli_notifications_into_system() -> None:
    reader = ProtocolReader()
    init = reader.decode(b'{"type":"system","subtype":"init","tools":["Bash"]}')
    assert isinstance(init, SystemInit)
    assert (message_kind(init), wire_type(init)) == ("system_init", "system")
    reset = reader.decode(b'{"type":"conversation_reset","new_conversation_id":"x"}')
    assert reset is not None
    assert (message_kind(reset), wire_type(reset)) == ("system", "conversation_reset")
    unknown = reader.decode(b'{"type":"tool_progress"}')
    assert isinstance(unknown, Unknown)
    assert (message_kind(unknown), wire_type(unknown)) == ("unknown", "tool_progress")


def test_a_line_that_is_no_message_is_stored_as_invalid() -> None:
    assert line_type(None) == INVALID_LINE
