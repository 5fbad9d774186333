"""The restart sweep: one turn of a fake claude that crosses every kind of boundary, with the
daemon restarted at each of them, every client view compared with the turn seen without one.

The fake claude (devtools/fake_claude.py) plays TURN: system/init, message_start, a streamed
text block (its `assistant` line before its block stop, as the CLI prints it), a streamed Bash
tool call and its permission request, an AskUserQuestion and its question, a last text block,
message_delta/stop and the `result`. A sweep point is a place in that turn: "before line k"
(the fake pauses before printing its k-th line, k = the turn's line count being the idle after
it), or "request r pending" (claude waits for the answer, nobody has given it).

For one restart kind, one daemon runs a baseline session (no restart) and one session per
point; the n-th claude started plays the n-th run of the script, so each session's claude
pauses at its own point. Once every session waits at its point and the daemon has committed
all that their claude printed, the daemon restarts once (`daemon restart`'s SIGUSR2, or
SIGKILL and a new start), the claudes go on, and each session must give, to a live client
that reconnects from the last event it saw, to a replay from 0 (ResumeSession) and to the
batched stream (ResumeSessionBatched), the baseline's events: the same events and text, in
contiguous sequences.

What is compared: the stored events (those the turn is made of; the input lock's events
belong to the clients attaching, and `is_replay` copies of waiting requests are not stored),
with what differs between any two runs blanked: timestamps, session ids and directories,
durations, expiries, and ids (renamed in order of appearance).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from harness.conditions import until
from harness.daemon import Client
from harness.fake_claude import FakeClaude
from harness.restarts import Restarts, spooled_end

KINDS = ("graceful", "kill9")
QUESTION = {
    "questions": [
        {
            "question": "Which colour?",
            "header": "Colour",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
            "multiSelect": False,
        }
    ]
}
TURN: list[dict[str, Any]] = [
    {"do": "text", "text": "Let me look at it.", "deltas": 3},
    {"do": "permission", "tool_name": "Bash", "input": {"command": "ls"}, "stream": True},
    {"do": "permission", "tool_name": "AskUserQuestion", "input": QUESTION, "stream": True},
    {"do": "text", "text": "All done.", "deltas": 2},
]
# What the fake prints in TURN, line by line (checked against the baseline's stored lines).
TURN_LINES = [
    *("system/init", "message_start"),
    *("content_block_start", "text_delta", "text_delta", "text_delta", "assistant", "block_stop"),
    *("tool block_start", "input_json_delta", "assistant tool_use", "tool block_stop"),
    *("can_use_tool Bash", "tool_result Bash"),
    *("tool block_start", "input_json_delta", "assistant tool_use", "tool block_stop"),
    *("can_use_tool AskUserQuestion", "tool_result AskUserQuestion"),
    *("content_block_start", "text_delta", "text_delta", "assistant", "block_stop"),
    *("message_delta", "message_stop", "result"),
]
REQUESTS = ("permission_request", "user_question")
FILTERED_KINDS = {"input_lock", "input_lock_requested"}
BLANKED_KEYS = {"timestamp", "durationMs", "expiresAt", "sequence"}
ID = re.compile(r"^(toolu_\w+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


@dataclass(frozen=True)
class Point:
    """Where in TURN the daemon restarts."""

    label: str
    pause_before: int | None  # the fake pauses before its line k (None: no pause)
    pending: int | None  # or: the daemon restarts while request `pending` waits (0, 1)


def all_points() -> list[Point]:
    points = [
        Point(f"before line {k}: {TURN_LINES[k] if k < len(TURN_LINES) else 'idle'}", k, None)
        for k in range(len(TURN_LINES) + 1)
    ]
    points += [Point(f"{REQUESTS[r]} pending", None, r) for r in range(len(REQUESTS))]
    return points


@dataclass
class Run:
    """One session of the sweep and what its clients saw."""

    point: Point | None  # None: the baseline
    paused_file: Path
    session_id: str = ""
    before: Client | None = None  # the live client until the restart
    after: Client | None = None  # the same client reconnected
    answered: set[str] = field(default_factory=set)


@dataclass
class Mismatch:
    kind: str
    point: str
    view: str
    detail: str


async def sweep(tmp: Path, kinds: tuple[str, ...], points: list[Point]) -> list[Mismatch]:
    """Every point of `points` under each restart kind; the mismatches found (none: exact)."""
    mismatches: list[Mismatch] = []
    for kind in kinds:
        root = tmp / kind
        root.mkdir()
        restarts = Restarts(root)
        try:
            mismatches += await _sweep_one_kind(restarts, kind, points)
        finally:
            await restarts.close()
    return mismatches


async def _sweep_one_kind(restarts: Restarts, kind: str, points: list[Point]) -> list[Mismatch]:
    root = restarts.tmp_path
    resume_file = root / "resume"
    fake = FakeClaude(root)
    runs = [Run(None, root / "paused-baseline")] + [
        Run(point, root / f"paused-{n}") for n, point in enumerate(points)
    ]
    script = [{"turns": [TURN]}] + [
        {"turns": [TURN], **_pause(run, resume_file)} for run in runs[1:]
    ]
    binary = fake.binary(script)
    repo = root / "repo"
    repo.mkdir()
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}
    await restarts.start(binary, environ)

    baseline = runs[0]
    await _start(restarts, baseline, repo, 0)
    await _play_to_the_end(baseline, baseline.before)
    assert _turn_lines(restarts, baseline) == len(TURN_LINES), "TURN_LINES is not TURN's lines"
    for number, run in enumerate(runs[1:], start=1):
        await _start(restarts, run, repo, number)
        await _reach(run)
    await _all_committed(restarts, runs[1:])

    for run in runs[1:]:
        assert run.before is not None
        await run.before.close()  # a client of a daemon that goes away is cut off
    await restarts.restart(kind)
    resume_file.touch()
    for run in runs[1:]:
        run.after = _reconnect(restarts, run)
    await asyncio.gather(*(_play_to_the_end(run, run.after) for run in runs[1:]))

    assert baseline.before is not None
    expected = baseline.before.events
    found: list[Mismatch] = []
    for run in runs[1:]:
        assert run.point is not None
        assert run.before is not None
        live = run.before.events + ([] if run.after is None else run.after.events)
        for view, events in (await client_views(restarts, run.session_id, live)).items():
            problem = compare_views(expected, events)
            if problem:
                found.append(Mismatch(kind, run.point.label, view, problem))
    return found


def _pause(run: Run, resume_file: Path) -> dict[str, Any]:
    assert run.point is not None
    if run.point.pause_before is None:
        return {}
    pause = {"before_line": run.point.pause_before, "paused_file": str(run.paused_file)}
    return {"pause": {**pause, "resume_file": str(resume_file)}}


async def _start(restarts: Restarts, run: Run, repo: Path, number: int) -> None:
    """A new session whose claude is the fake's start `number` (so it plays its run)."""
    client = restarts.client("writer")
    client.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    await client.wait_for("session_info")
    run.session_id = client.session_id
    run.before = client
    client.say("go")
    await until(lambda: _holders_written(restarts) > number, within_s=30)


def _holders_written(restarts: Restarts) -> int:
    """How many holders wrote their holder.json (one being written does not count yet)."""
    written = 0
    for facts in (restarts.root / "data" / "holders").glob("*/holder.json"):
        try:
            json.loads(facts.read_text())
        except (ValueError, FileNotFoundError):
            continue
        written += 1
    return written


def _requests(client: Client) -> list[agent_pb2.AgentEvent]:
    return [e for e in client.events if e.WhichOneof("event") in REQUESTS]


def _answer(run: Run, client: Client, request: agent_pb2.AgentEvent) -> None:
    if request.HasField("permission_request"):
        request_id = request.permission_request.request_id
        if request_id not in run.answered:
            client.answer(request_id, common_pb2.PERMISSION_DECISION_ALLOW_ONCE)
    else:
        question = request.user_question
        request_id = question.question_id
        if request_id not in run.answered:
            answers = {question.questions[0].question: question.questions[0].options[0].label}
            response = agent_pb2.UserQuestionResponse(question_id=request_id, answers=answers)
            client.send(agent_pb2.AgentRequest(question_response=response))
    run.answered.add(request_id)


async def _reach(run: Run) -> None:
    """Play the run's turn up to its point: answer what is asked before it."""
    client, point = run.before, run.point
    assert client is not None
    assert point is not None
    deadline = time.monotonic() + 30
    while True:
        asked = _requests(client)
        if point.pending is not None and len(asked) > point.pending:
            return  # the request waits; nobody answers it before the restart
        for request in asked:
            _answer(run, client, request)
        if point.pause_before is not None and run.paused_file.exists():
            return
        assert time.monotonic() < deadline, f"{point.label}: never reached"
        await asyncio.sleep(0.01)


async def _play_to_the_end(run: Run, client: Client | None) -> None:
    """Answer what is asked until the turn completed and the session is idle after it."""
    assert client is not None
    seen = [] if run.before is None or run.before is client else run.before.events

    deadline = time.monotonic() + 60
    while not idle_after_turns(seen + client.events, 1):
        for request in _requests(client):
            _answer(run, client, request)
        assert time.monotonic() < deadline, f"{run.session_id}: the turn never ended"
        await asyncio.sleep(0.01)


async def _all_committed(restarts: Restarts, runs: list[Run]) -> None:
    """Every claude waits at its point and the daemon committed all it printed."""
    holders = {h["session_id"]: h["dir"] for h in restarts.holders()}

    def committed() -> bool:
        with closing(sqlite3.connect(restarts.database)) as db:
            offsets = dict(db.execute("SELECT session_id, stdout_offset FROM holder_positions"))
        return all(
            offsets.get(run.session_id, 0) == spooled_end(holders[run.session_id]) for run in runs
        )

    await until(committed, within_s=30)
    # A request claude waits on is shown once stored (after its line's commit).
    for run in runs:
        assert run.point is not None
        if run.point.pending is not None:
            assert run.before is not None
            await run.before.wait_for(REQUESTS[run.point.pending], within_s=30)


def _turn_lines(restarts: Restarts, run: Run) -> int:
    """How many lines the turn of `run` printed (the answers to the daemon's control requests
    come from another thread of the fake, at no fixed place)."""
    with closing(sqlite3.connect(restarts.database)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ? AND direction = 'out' "
            "AND message_type != 'control_response'",
            (run.session_id,),
        ).fetchone()
    return int(count)


def _reconnect(restarts: Restarts, run: Run) -> Client:
    assert run.before is not None
    return reconnect(restarts, run.session_id, run.before)


def reconnect(restarts: Restarts, session_id: str, before: Client) -> Client:
    """The client `before` (cut off by a restart) attached again after the last event it saw."""
    seen = max(before.sequences, default=0)
    client = restarts.client(before.client_id)
    client.converse(agent_pb2.StartConversation(session_id=session_id, from_sequence=seen))
    return client


def idle_after_turns(events: list[agent_pb2.AgentEvent], turns: int) -> bool:
    """Whether `turns` turns completed and the session went IDLE after the last of them."""
    done = [e.sequence for e in events if e.WhichOneof("event") == "turn_complete"]
    return len(done) >= turns and any(
        e.status_change.status == common_pb2.AGENT_STATUS_IDLE and e.sequence > done[turns - 1]
        for e in events
        if e.WhichOneof("event") == "status_change"
    )


async def client_views(
    restarts: Restarts, session_id: str, live: list[agent_pb2.AgentEvent]
) -> dict[str, list[agent_pb2.AgentEvent]]:
    """The session's events as each kind of client got them: `live` (a client's), a replay
    from 0 and the batched stream."""
    replay = restarts.client("replay")
    replay.resume(session_id, from_sequence=0, follow=False)
    await replay.ended()
    return {"live": live, "replay": replay.events, "batched": await _batched(restarts, session_id)}


async def _batched(restarts: Restarts, session_id: str) -> list[agent_pb2.AgentEvent]:
    assert restarts.daemon is not None
    async with grpc.aio.insecure_channel(f"unix:{restarts.daemon.socket}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=0, follow=False
        )
        events: list[agent_pb2.AgentEvent] = []
        async for batch in stub.ResumeSessionBatched(request, metadata=(("x-client-id", "b"),)):
            events += batch.events
    return events


def _stored(events: list[agent_pb2.AgentEvent]) -> list[agent_pb2.AgentEvent]:
    """The stored events of a view: `is_replay` copies of waiting requests are not."""
    return [
        e
        for e in events
        if e.sequence
        and not (e.HasField("permission_request") and e.permission_request.is_replay)
        and not (e.HasField("user_question") and e.user_question.is_replay)
    ]


def normalized(events: list[agent_pb2.AgentEvent]) -> list[str]:
    """The turn's events with what differs between two runs of it blanked."""
    names: dict[str, str] = {}

    def blank(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: blank(v) for k, v in value.items() if k not in BLANKED_KEYS}
        if isinstance(value, list):
            return [blank(v) for v in value]
        if isinstance(value, str) and ID.match(value):
            return names.setdefault(value, f"<id{len(names)}>")
        return value

    kept = []
    for event in _stored(events):
        if event.WhichOneof("event") in FILTERED_KINDS:
            continue
        body = MessageToDict(event)
        if "sessionInfo" in body:
            body["sessionInfo"].pop("workingDirectory", None)
        kept.append(json.dumps(blank(body), sort_keys=True))
    return kept


def compare_views(expected: list[agent_pb2.AgentEvent], got: list[agent_pb2.AgentEvent]) -> str:
    """ "" when `got` is exact: contiguous stored sequences and the baseline's events."""
    sequences = [e.sequence for e in _stored(got)]
    if sequences != list(range(1, len(sequences) + 1)):
        return f"sequences not contiguous from 1: {sequences}"
    want, have = normalized(expected), normalized(got)
    if want == have:
        return ""
    first = next(
        (n for n, (a, b) in enumerate(zip(want, have, strict=False)) if a != b),
        min(len(want), len(have)),
    )
    return (
        f"{len(have)} events, {len(want)} expected; first difference at {first}: "
        f"got {have[first : first + 2]}, expected {want[first : first + 2]}"
    )


def text_of(events: list[agent_pb2.AgentEvent]) -> str:
    return "".join(e.text_delta.text for e in _stored(events) if e.HasField("text_delta"))
