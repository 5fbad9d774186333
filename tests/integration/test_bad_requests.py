"""Bad requests (fault test "h" of the daemon-core issue): every AgentService RPC that names a
session, and every request a Converse stream carries, answers a malformed or impossible request
with a clear status, and changes nothing; the daemon and the streams keep working.

One daemon serves the whole table, on a real Unix socket. Its fake claude asks for one Bash
permission and waits, so the session is mid-turn with a pending request; a client holding the
input lock and an observer without it are attached. Each row compares the stored state (sessions,
stored lines and events, pending requests, grants, idempotency keys) before and after.
"""

# ruff: noqa: E501  (the table reads best with one row per line)
from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from harness.daemon import Client, daemon_config

from betcode.claude.backoff import SupervisorPolicy
from betcode.core.errors import GRPC_STATUS, ErrorCode
from betcode.core.validation import MAX_TEXT_BYTES
from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2

pytestmark = pytest.mark.asyncio(loop_scope="module")

Code = grpc.StatusCode
Decision = common_pb2.PermissionDecision
ALLOW_ONCE = Decision.PERMISSION_DECISION_ALLOW_ONCE
ALLOW_WITH_EDIT = Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT
DENY = Decision.PERMISSION_DECISION_DENY
CRASHED = common_pb2.AgentStatus.AGENT_STATUS_CRASHED
OVERSIZED = "x" * (MAX_TEXT_BYTES + 1)
TOO_LONG_ID = "s" * 129
TABLE_CLIENT = "table-client"
ASK_THEN_WAIT = {
    "turns": [
        [{"do": "permission", "tool_name": "Bash", "input": {"command": "echo hi"}}],
        [{"do": "text", "text": "second turn"}],
    ]
}


@dataclass
class World:
    daemon: Daemon
    socket: Path
    database: Path
    stub: agent_pb2_grpc.AgentServiceStub
    holder: Client
    observer: Client
    session_id: str
    request_id: str


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("bad")
    repo = root / "repo"
    repo.mkdir()
    fake = make_fake_claude(root / "fake", {"runs": [ASK_THEN_WAIT]})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}
    config = daemon_config(root / "daemon", fake, environ, config_dir=root / "config")
    daemon = Daemon(config)
    await daemon.start()
    holder = Client(config.socket_path, "holder")
    observer = Client(config.socket_path, "observer")
    try:
        holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
        await holder.wait_for("session_info")
        observer.converse(agent_pb2.StartConversation(session_id=holder.session_id))
        await observer.wait_for("session_info")
        holder.say("run a tool")
        request = (await holder.wait_for("permission_request")).permission_request
        await observer.wait_for("permission_request")
        yield World(
            daemon,
            config.socket_path,
            config.data_dir / "daemon.db",
            holder.stub,
            holder,
            observer,
            holder.session_id,
            request.request_id,
        )
    finally:
        await holder.close()
        await observer.close()
        await daemon.stop()


Outcome = tuple[grpc.StatusCode, str]
Call = Callable[[World], Awaitable[Outcome]]


def metadata(client_id: str) -> tuple[tuple[str, str]]:
    return (("x-client-id", client_id),)


STREAMS = {"Converse", "ResumeSession", "ResumeSessionBatched"}


def rpc(method: str, make: Callable[[World], object], client_id: str = TABLE_CLIENT) -> Call:
    """Call `method` with `make(world)`; a stream's first read tells how it ended."""

    async def call(world: World) -> Outcome:
        stub_method = getattr(world.stub, method)
        try:
            if method in STREAMS:
                stream = stub_method(make(world), metadata=metadata(client_id))
                try:
                    await stream.read()
                finally:
                    stream.cancel()
            else:
                await stub_method(make(world), metadata=metadata(client_id))
        except grpc.aio.AioRpcError as error:
            return error.code(), error.details() or ""
        return Code.OK, ""

    return call


async def reply_on_stream(client: Client, request: agent_pb2.AgentRequest) -> Outcome:
    """Send mid-stream; the answer to a bad request is an error event for this client only."""
    errors = len(client.of_kind("error"))
    client.send(request)
    event = await client.wait_for("error", errors + 1, within_s=20)
    assert event.sequence == 0  # not stored, not shown to other clients
    return GRPC_STATUS[ErrorCode(event.error.code)], event.error.message


def sent_by(who: str, make: Callable[[World], agent_pb2.AgentRequest]) -> Call:
    async def call(world: World) -> Outcome:
        return await reply_on_stream(getattr(world, who), make(world))

    return call


def start(**fields: Any) -> list[agent_pb2.AgentRequest]:
    return [agent_pb2.AgentRequest(start=agent_pb2.StartConversation(**fields))]


def message(content: str, key: str = "") -> agent_pb2.AgentRequest:
    return agent_pb2.AgentRequest(
        message=agent_pb2.UserMessage(content=content, idempotency_key=key)
    )


def respond(request_id: str, decision: int, **fields: Any) -> agent_pb2.AgentRequest:
    # Any number, as the wire carries it (an unknown one is refused).
    response = agent_pb2.PermissionResponse(
        request_id=request_id, decision=Decision.ValueType(decision), **fields
    )
    return agent_pb2.AgentRequest(permission=response)


def struct(**values: Any) -> struct_pb2.Struct:
    made = struct_pb2.Struct()
    made.update(values)
    return made


def answer(world: World, **fields: Any) -> agent_pb2.AnswerPermissionRequest:
    fields.setdefault("request_id", world.request_id)
    fields.setdefault("decision", ALLOW_ONCE)
    return agent_pb2.AnswerPermissionRequest(**fields)


def answer_rpc(**fields: Any) -> Call:
    return rpc("AnswerPermission", lambda w: answer(w, **fields))


def holder_answers(decision: int, **fields: Any) -> Call:
    return sent_by("holder", lambda w: respond(w.request_id, decision, **fields))


# Every RPC that names a session, with the request naming session `s`.
SESSION_REQUESTS: dict[str, Callable[[World, str], object]] = {
    "Converse": lambda w, s: start(session_id=s),
    "ResumeSession": lambda w, s: agent_pb2.ResumeSessionRequest(session_id=s),
    "ResumeSessionBatched": lambda w, s: agent_pb2.ResumeSessionRequest(session_id=s),
    "CompactSession": lambda w, s: agent_pb2.CompactSessionRequest(session_id=s),
    "CancelTurn": lambda w, s: agent_pb2.CancelTurnRequest(session_id=s),
    "RequestInputLock": lambda w, s: agent_pb2.InputLockRequest(session_id=s),
    "ListSessionGrants": lambda w, s: agent_pb2.ListSessionGrantsRequest(session_id=s),
    "ClearSessionGrants": lambda w, s: agent_pb2.ClearSessionGrantsRequest(session_id=s),
    "SetSessionGrant": lambda w, s: agent_pb2.SetSessionGrantRequest(
        session_id=s, tool_name="Bash", granted=True
    ),
    "RenameSession": lambda w, s: agent_pb2.RenameSessionRequest(session_id=s, name="renamed"),
    "DeleteSession": lambda w, s: agent_pb2.DeleteSessionRequest(session_id=s),
    "ListPendingPermissions": lambda w, s: agent_pb2.ListPendingPermissionsRequest(session_id=s),
    "AnswerPermission": lambda w, s: answer(w, session_id=s),
}
# Where an empty session id means something else: a new session, every session, any session.
EMPTY_ID_MEANS_SOMETHING = {"Converse", "ListPendingPermissions", "AnswerPermission"}
BAD_SESSION_IDS: list[tuple[str, str, grpc.StatusCode, str]] = [
    ("unknown", "no-such-session", Code.NOT_FOUND, "no-such-session"),
    ("129 chars", TOO_LONG_ID, Code.INVALID_ARGUMENT, "129 characters; at most 128"),
    ("control char", "bad\x01id", Code.INVALID_ARGUMENT, "session_id must be printable"),
    ("newline", "bad\nid", Code.INVALID_ARGUMENT, "session_id must be printable"),
    ("empty", "", Code.INVALID_ARGUMENT, "session_id is required"),
]


def session_rpc(method: str, session_id: str) -> Call:
    make = SESSION_REQUESTS[method]
    return rpc(method, lambda w: make(w, session_id))


def lock_holder_compacts(client_id: str) -> Call:
    make = SESSION_REQUESTS["CompactSession"]
    return rpc("CompactSession", lambda w: make(w, w.session_id), client_id)


def renames_to(name: str) -> Call:
    return rpc(
        "RenameSession",
        lambda w: agent_pb2.RenameSessionRequest(session_id=w.session_id, name=name),
    )


NO_LOCK = "does not hold the input lock"
INVALID = Code.INVALID_ARGUMENT
TOO_BIG = f"{MAX_TEXT_BYTES + 1} bytes; at most {MAX_TEXT_BYTES} bytes"
ROWS: list[tuple[str, Call, grpc.StatusCode, str]] = [
    (f"{method} {label}", session_rpc(method, session_id), status, says)
    for method in SESSION_REQUESTS
    for label, session_id, status, says in BAD_SESSION_IDS
    if session_id or method not in EMPTY_ID_MEANS_SOMETHING
    # Converse makes a session of an unknown id, if it is a UUID (row below).
    if not (method == "Converse" and label == "unknown")
]
ROWS += [
    # Converse: the start request
    ("Converse unknown non-UUID id", session_rpc("Converse", "no-such-session"), INVALID, "must be a UUID"),
    ("Converse without start", rpc("Converse", lambda w: [message("hi")]), INVALID, "`start`"),
    ("Converse relative cwd", rpc("Converse", lambda w: start(working_directory="a/b")), INVALID, "must be absolute"),
    ("Converse unknown client_type", rpc("Converse", lambda w: start(client_type="robot")), INVALID, "client_type 'robot'"),
    # Converse: requests mid-stream
    ("prompt over 1 MiB", sent_by("holder", lambda w: message(OVERSIZED)), INVALID, TOO_BIG),
    ("empty prompt", sent_by("holder", lambda w: message("")), INVALID, "the message is empty"),
    ("blank prompt", sent_by("holder", lambda w: message(" \n\t")), INVALID, "the message is empty"),
    ("prompt without the lock", sent_by("observer", lambda w: message("me too")), Code.FAILED_PRECONDITION, NO_LOCK),
    ("keyed prompt without the lock", sent_by("observer", lambda w: message("me", key="k-1")), Code.FAILED_PRECONDITION, NO_LOCK),
    ("idempotency key too long", sent_by("holder", lambda w: message("hi", key="k" * 129)), INVALID, "idempotency_key is 129 characters"),
    ("second start", sent_by("holder", lambda w: start()[0]), INVALID, "unexpected request `start`"),
    ("answer unknown request", sent_by("holder", lambda w: respond("no-such-request", ALLOW_ONCE)), Code.NOT_FOUND, "no-such-request"),
    ("answer empty request id", sent_by("holder", lambda w: respond("", ALLOW_ONCE)), INVALID, "request_id is required"),
    ("answer without the lock", sent_by("observer", lambda w: respond(w.request_id, ALLOW_ONCE)), Code.FAILED_PRECONDITION, NO_LOCK),
    ("edit without input", holder_answers(ALLOW_WITH_EDIT), INVALID, "needs updated_input"),
    ("edit with NaN", holder_answers(ALLOW_WITH_EDIT, updated_input=struct(command=math.nan)), INVALID, "updated_input holds a NaN"),
    ("unknown decision", holder_answers(99), INVALID, "unknown permission decision 99"),
    ("deny message over 1 MiB", holder_answers(DENY, message=OVERSIZED), INVALID, f"message is {TOO_BIG}"),
    ("answer unknown question", sent_by("holder", lambda w: agent_pb2.AgentRequest(question_response=agent_pb2.UserQuestionResponse(question_id="no-such-question", answers={"q": "a"}))), Code.NOT_FOUND, "no-such-question"),
    # AnswerPermission, from any terminal
    ("AnswerPermission unknown request", answer_rpc(request_id="no-such-request"), Code.NOT_FOUND, "no-such-request"),
    ("AnswerPermission empty request id", answer_rpc(request_id=""), INVALID, "request_id is required"),
    ("AnswerPermission request id too long", answer_rpc(request_id="r" * 129), INVALID, "request_id is 129 characters"),
    ("AnswerPermission edit without input", answer_rpc(decision=ALLOW_WITH_EDIT), INVALID, "needs updated_input"),
    ("AnswerPermission edit with infinity", answer_rpc(decision=ALLOW_WITH_EDIT, updated_input=struct(n=[1, {"x": math.inf}])), INVALID, "NaN or infinite"),
    ("AnswerPermission input over 1 MiB", answer_rpc(decision=ALLOW_WITH_EDIT, updated_input=struct(c=OVERSIZED)), INVALID, f"at most {MAX_TEXT_BYTES} bytes"),
    ("AnswerPermission message over 1 MiB", answer_rpc(decision=DENY, message=OVERSIZED), INVALID, f"message is {TOO_BIG}"),
    ("AnswerPermission answers over 1 MiB", answer_rpc(answers={"q": OVERSIZED}), INVALID, "answers are"),
    ("AnswerPermission unknown decision", answer_rpc(decision=42), INVALID, "unknown permission decision 42"),
    # Other fields
    ("CompactSession mid-turn", lock_holder_compacts("holder"), Code.FAILED_PRECONDITION, "middle of a turn"),
    ("CompactSession past the lock", lock_holder_compacts("observer"), Code.FAILED_PRECONDITION, NO_LOCK),
    ("RenameSession two-line name", renames_to("a\nb"), INVALID, "one line"),
    ("RenameSession name too long", renames_to("n" * 257), INVALID, "257 characters; at most 256"),
    ("SetSessionGrant without tool", rpc("SetSessionGrant", lambda w: agent_pb2.SetSessionGrantRequest(session_id=w.session_id)), INVALID, "tool_name is required"),
]  # fmt: skip


@dataclass(frozen=True)
class Stored:
    sessions: list[tuple[str, str]]
    listed: list[str]
    lines: int
    events: int
    pending: list[tuple[str, int, str | None]]
    grants: int
    idempotency_keys: int


async def stored(world: World) -> Stored:
    # A write through the daemon's single writer: everything queued before it is committed.
    await world.stub.ClearSessionGrants(
        agent_pb2.ClearSessionGrantsRequest(session_id=world.session_id, tool_name="NoSuchTool")
    )
    listed = await world.stub.ListSessions(agent_pb2.ListSessionsRequest())
    with sqlite3.connect(world.database) as conn:

        def count(table: str) -> int:
            return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

        return Stored(
            sessions=conn.execute("SELECT id, name FROM sessions ORDER BY id").fetchall(),
            listed=sorted(session.id for session in listed.sessions),
            lines=count("messages"),
            events=count("events"),
            pending=conn.execute(
                "SELECT request_id, response_received, response_decision "
                "FROM pending_permissions ORDER BY request_id"
            ).fetchall(),
            grants=count("permission_grants"),
            idempotency_keys=count("processed_idempotency_keys"),
        )


@pytest.mark.parametrize(
    ("call", "status", "says"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS]
)
async def test_a_bad_request_gets_a_clear_status_and_changes_nothing(
    world: World, call: Call, status: grpc.StatusCode, says: str
) -> None:
    before = await stored(world)
    got, message_text = await call(world)
    assert (got, says in message_text) == (status, True), message_text[:300]
    assert await stored(world) == before
    # Both streams still answer.
    for client in (world.holder, world.observer):
        assert (await reply_on_stream(client, message("")))[0] == Code.INVALID_ARGUMENT


async def test_after_the_table_the_session_goes_on_and_repeats_are_applied_once(
    world: World,
) -> None:
    world.holder.answer(world.request_id, ALLOW_ONCE)
    for client in (world.holder, world.observer):
        resolved = (await client.wait_for("permission_resolved")).permission_resolved
        assert (resolved.request_id, resolved.outcome) == (world.request_id, "allowed")
        await client.wait_for("turn_complete")
    before = await stored(world)
    again = await world.stub.AnswerPermission(
        answer(world, decision=DENY), metadata=metadata("late")
    )
    assert (again.accepted, again.duplicate, again.outcome) == (True, True, "allowed")
    # ... and so is `betcode permissions allow` from another terminal.
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", "permissions", "allow", world.request_id,
        "--socket", str(world.socket), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await cli.communicate()
    assert (cli.returncode, out.decode().strip()) == (
        0,
        f"{world.request_id} was already answered: allowed",
    )
    assert await stored(world) == before
    # A retried message (same idempotency key) is applied once.
    world.holder.send(message("and now?", key="retry-1"))
    world.holder.send(message("and now?", key="retry-1"))
    await reply_on_stream(world.holder, message(""))  # the stream has handled both
    for client in (world.holder, world.observer):
        await client.wait_for("turn_complete", 2)
    last = max(
        event.sequence for client in (world.holder, world.observer) for event in client.events
    )
    for client in (world.holder, world.observer):
        await client.wait_for_sequence(last)  # events of one batch may still be on their way
    sequences = [event.sequence for event in world.holder.events if event.sequence]
    assert sequences == list(range(1, len(sequences) + 1))
    assert [e.sequence for e in world.observer.events if e.sequence] == sequences
    assert len(world.holder.of_kind("permission_resolved")) == 1
    inputs = [event.user_input.content for event in world.holder.of_kind("user_input")]
    assert inputs == ["run a tool", "and now?"]


async def test_input_to_a_crashed_session_restarts_it_and_the_stream_goes_on(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    crash = {"startup": [{"do": "exit", "code": 1}]}
    answer = {"turns": [[{"do": "text", "text": "back"}]]}
    starts = tmp_path / "starts.jsonl"  # numbers the starts: the sixth one answers
    script = {"log": str(starts), "runs": [crash] * 5 + [answer]}
    crashing = make_fake_claude(tmp_path / "fake", script)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    fast = SupervisorPolicy(backoff_initial=0.01, backoff_max=0.02, idle_reap_seconds=None)
    config = daemon_config(
        tmp_path / "d", crashing, environ, config_dir=tmp_path / "c", policy=fast
    )
    daemon = Daemon(config)
    await daemon.start()
    client = Client(config.socket_path, "holder")
    try:
        client.converse(agent_pb2.StartConversation(working_directory=str(repo)))
        await client.wait_for("session_info")
        client.say("hello")
        changes = 1  # the crash loop ends in CRASHED
        while (await client.wait_for("status_change", changes)).status_change.status != CRASHED:
            changes += 1
        # A new message is the manual action that restarts claude: not refused.
        refusals = [e for e in client.of_kind("error") if e.sequence == 0]
        client.send(message("hello again", key="k-crashed"))
        await client.wait_for("turn_complete", within_s=20)
        assert [e for e in client.of_kind("error") if e.sequence == 0] == refusals
        with sqlite3.connect(config.data_dir / "daemon.db") as conn:  # applied: a retry is not
            assert conn.execute("SELECT key FROM processed_idempotency_keys").fetchall() == [
                ("k-crashed",)
            ]
        assert (await reply_on_stream(client, message("")))[0] == Code.INVALID_ARGUMENT
        cancelled = await client.stub.CancelTurn(
            agent_pb2.CancelTurnRequest(session_id=client.session_id)
        )
        assert not cancelled.was_active
        assert len(starts.read_text().splitlines()) == 6
    finally:
        await client.close()
        await daemon.stop()
