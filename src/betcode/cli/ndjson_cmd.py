"""`betcode ndjson inspect FILE [--json]`: read a saved claude stdout, one line per message.

Lines that are not JSON, not UTF-8 or not objects are counted (`invalid`), not shown, and do not
change the exit status: 0 when the file was read, 5 (invalid arguments, docs/CLI.md#exit-codes) when
it could not be.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

import click

from betcode.cli.exit_codes import ExitCode
from betcode.protocol.framing import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_READ_CHUNK_BYTES,
    Line,
    LineFramer,
    PayloadLimitError,
    validate_max_payload_bytes,
)
from betcode.protocol.kinds import describe
from betcode.protocol.reader import ProtocolReader


@click.group("ndjson")
def ndjson() -> None:
    """Tools for Claude Code stream-json (NDJSON) transcripts."""


@ndjson.command("inspect")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per message, then a summary."
)
@click.option(
    "--max-line-bytes",
    type=int,
    default=DEFAULT_MAX_PAYLOAD_BYTES,
    show_default=True,
    help="Payload limit (1–100 MiB); longer lines are truncated, as the daemon does.",
)
def inspect(file: Path, as_json: bool, max_line_bytes: int) -> None:
    """Print one line per message in FILE, then a summary.

    With --json each line is an object with a "kind" (system_init, system, assistant, user,
    stream_event, control_request, control_cancel_request, control_response, result,
    keep_alive, unknown) and the last line is {"summary": {...}}.
    """
    try:
        framer = LineFramer(validate_max_payload_bytes(max_line_bytes))
    except PayloadLimitError as error:
        raise click.BadParameter(str(error), param_hint="--max-line-bytes") from None
    try:
        with file.open("rb") as transcript:
            summary = _inspect(transcript, framer, as_json)
    except OSError as error:
        click.echo(f"Error: cannot read {file}: {error.strerror or error}", err=True)
        raise click.exceptions.Exit(ExitCode.INVALID_ARGUMENTS) from None
    if as_json:
        click.echo(json.dumps({"summary": summary}, ensure_ascii=False))
    else:
        by_kind = ", ".join(f"{kind} {count}" for kind, count in summary["by_kind"].items())
        click.echo(
            f"summary: {summary['lines']} lines ({by_kind or 'no messages'}); "
            f"{summary['invalid']} invalid, {summary['truncated']} truncated"
        )


def _inspect(transcript: BinaryIO, framer: LineFramer, as_json: bool) -> dict[str, Any]:
    reader = ProtocolReader()
    by_kind: Counter[str] = Counter()
    while chunk := transcript.read(DEFAULT_READ_CHUNK_BYTES):
        _show_lines(framer.feed(chunk), reader, by_kind, as_json)
    _show_lines(framer.finish(), reader, by_kind, as_json)
    stats = reader.stats
    return {
        "lines": stats.lines,
        "by_kind": dict(by_kind),
        "invalid": stats.invalid,
        "truncated": stats.truncated,
    }


def _show_lines(
    lines: list[Line], reader: ProtocolReader, by_kind: Counter[str], as_json: bool
) -> None:
    for line in lines:
        message = reader.decode_line(line)
        if message is None:
            continue
        description = describe(message)
        by_kind[description["kind"]] += 1
        click.echo(
            json.dumps(description, ensure_ascii=False) if as_json else _as_text(description)
        )


def _as_text(description: dict[str, Any]) -> str:
    kind = description.pop("kind")
    details = " ".join(f"{key}={_text_value(value)}" for key, value in description.items())
    return f"{kind:<24}{details}".rstrip()


def _text_value(value: object) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
