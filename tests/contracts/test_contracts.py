"""Contract tests: transcripts recorded from real Claude Code CLIs, read by BetCode's codec.

One folder per CLI version (claude_code_<version>/, made by scripts/record_contracts); every
transcript of every folder must decode completely, with nothing Unknown whose type the codec
knows, and must show the messages its recording is about. A new CLI version is one new folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from betcode.protocol.builders import BUILDERS
from betcode.protocol.framing import LineFramer
from betcode.protocol.kinds import describe
from betcode.protocol.messages import Message, Result, SystemInit, Unknown
from betcode.protocol.reader import ProtocolReader

CONTRACTS = Path(__file__).resolve().parent
TRANSCRIPTS = sorted(CONTRACTS.glob("claude_code_*/*.ndjson"))

TURN = {"system_init", "system:command_lifecycle", "stream_event:message_start", "result:success"}
TEXT = {"stream_event:text_delta", "assistant:text"}
TOOL = {"stream_event:input_json_delta", "assistant:tool_use", "user:tool_result"}
PERMISSION = {"control_request:can_use_tool"}
ABORTED_TOOLS = (
    TURN - {"result:success"}
    | TOOL
    | PERMISSION
    | {
        "user:text",
        "result:error_during_execution!",
    }
)
# What each recording is about (labels: see `label`; "!" marks an is_error result).
EXPECTED: dict[str, set[str]] = {
    "text_turn": TURN | TEXT | {"control_response", "system:status"},
    "bash_allow": TURN | TEXT | TOOL | PERMISSION,
    "bash_deny": TURN | TEXT | TOOL | PERMISSION,
    "bash_deny_interrupt": ABORTED_TOOLS,
    "interrupt_permission": ABORTED_TOOLS | {"control_cancel_request", "control_response"},
    "interrupt_stream": TURN - {"result:success"}
    | TEXT
    | {"control_response", "user:text", "result:error_during_execution!"},
    "ask_user_question": TURN | TEXT | TOOL | PERMISSION,
    "two_tools": TURN | TEXT | TOOL | PERMISSION,
    "file_tools": TURN | TEXT | TOOL | PERMISSION,
    "multi_turn": TURN | TEXT | TOOL | PERMISSION,
    "api_retry": TURN | TEXT | {"system:api_retry"},
    "api_error": TURN - {"stream_event:message_start", "result:success"}
    | {"assistant:text", "result:success!"},
    "midstream_error": TURN | TEXT,
}


def label(message: Message) -> str:
    """A short name for what a message is: kind, then subtype / delta / content blocks."""
    description = describe(message)
    kind = str(description["kind"])
    if kind == "result":
        return f"result:{description['subtype']}{'!' if description['is_error'] else ''}"
    if kind == "stream_event":
        return f"stream_event:{description.get('delta') or description['event']}"
    if kind in ("assistant", "user"):
        return f"{kind}:{'+'.join(description['blocks'])}"
    return f"{kind}:{description['subtype']}" if "subtype" in description else kind


def read_transcript(path: Path) -> tuple[ProtocolReader, list[Message], int]:
    framer, reader = LineFramer(), ProtocolReader()
    lines = framer.feed(path.read_bytes()) + framer.finish()
    messages = [m for m in (reader.decode_line(line) for line in lines) if m is not None]
    return reader, messages, len(lines)


def test_contract_folders_are_recorded() -> None:
    assert TRANSCRIPTS, "no transcripts: run .venv/bin/python scripts/record_contracts"


@pytest.mark.parametrize(
    "path", TRANSCRIPTS, ids=[f"{p.parent.name}/{p.stem}" for p in TRANSCRIPTS]
)
def test_transcript_reads_canonically(path: Path) -> None:
    reader, messages, line_count = read_transcript(path)

    assert len(messages) == line_count, "every line decodes to a message"
    assert reader.stats.invalid == 0
    assert reader.stats.truncated == 0
    assert reader.stats.parse_errors_tolerated == 0, "known types read without coercion"
    unknown_known = [m.type for m in messages if isinstance(m, Unknown) and m.type in BUILDERS]
    assert unknown_known == []
    assert not reader.degraded, reader.degraded_reason

    expected = EXPECTED.get(path.stem)
    assert expected is not None, f"add the expectations of {path.stem!r} to EXPECTED"
    missing = expected - {label(m) for m in messages}
    assert not missing, f"{path.name} lacks {sorted(missing)}"


@pytest.mark.parametrize(
    "path", TRANSCRIPTS, ids=[f"{p.parent.name}/{p.stem}" for p in TRANSCRIPTS]
)
def test_every_turn_opens_with_init_and_closes_with_a_costed_result(path: Path) -> None:
    _, messages, _ = read_transcript(path)
    inits = [m for m in messages if isinstance(m, SystemInit)]
    results = [m for m in messages if isinstance(m, Result)]

    assert len(inits) == len(results) > 0
    assert [r.result_index for r in results] == list(range(len(results)))
    assert all(init.session_id == results[0].session_id for init in inits)
    costs = [r.total_cost_usd for r in results]
    assert None not in costs
    known = [cost for cost in costs if cost is not None]
    assert costs == sorted(known), "total_cost_usd is cumulative for the process"
    for result in results:
        if result.usage.output_tokens:  # the model answered: the turn is priced
            assert result.model_usage_since_last_result
            assert (result.total_cost_usd or 0.0) > 0
        if result.is_error and result.subtype == "success":
            assert result.api_error_status is not None  # an API failure, not an abort
