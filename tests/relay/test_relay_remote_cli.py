"""The command line through the relay, as a user runs it on another computer: an approval given
while the machine is offline is queued on the relay (the command says so and exits 0) and the
tool runs exactly once when the daemon is back; access tokens are renewed for a long run, and
commands refreshing at once keep the login; `--cwd` names a folder on the machine. A relay in
this event loop, the daemon in-process with the pinned real CLI and the mock model, `betcode`
in its own process."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sqlite3
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from harness.environment import Workspace
from harness.relay import (
    BASH_PROMPT,
    MACHINE,
    BetcodeUser,
    RelayProcess,
    Rig,
    login,
    rig_fixture,
    stderr_until,
    until,
    waiting_permission,
)

from betcode.devtools.fake_claude import make_fake_claude
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.relay.buffer import BufferSettings
from betcode.remote.frames import ACK_METADATA, ACK_RECORDED
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

rig = pytest.fixture(rig_fixture(BufferSettings()))


def cli_user(rig: Rig, tmp_path: Path, workspace: Workspace) -> BetcodeUser:
    relay = RelayProcess(rig.relay.options.files.root, url=f"https://127.0.0.1:{rig.relay.port}")
    return BetcodeUser(relay, tmp_path / "client-config", workspace.repo)


async def test_an_approval_for_an_offline_machine_is_queued_and_runs_once(
    rig: Rig, tmp_path: Path, workspace: Workspace
) -> None:
    await rig.start_daemon()
    user = cli_user(rig, tmp_path, workspace)
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    assert (await user.run("--machine", MACHINE, "sessions", "list")).code == 0  # pins the key
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    session_id, request_id = await waiting_permission(rig, start)
    await rig.stop_daemon(keep_sessions=True)  # offline; claude waits on under its holder

    allowed = await user.run("--machine", MACHINE, "permissions", "allow", request_id)
    assert allowed.code == 0, allowed.err
    assert f"queued on the relay until {MACHINE} reconnects" in allowed.out
    assert "error" not in allowed.err

    await rig.start_daemon()

    async def stored() -> list[agent_pb2.AgentEvent]:
        request = agent_pb2.ResumeSessionRequest(session_id=session_id)
        return [e async for e in rig.agent.ResumeSession(request, metadata=rig.metadata)]

    def ran(event: agent_pb2.AgentEvent) -> bool:
        return (
            event.WhichOneof("event") == "tool_call_result"
            and "hello-from-bash" in event.tool_call_result.output
        )

    async with asyncio.timeout(90):
        while True:  # polled through the relay: no event to wait on
            kinds = ["ran" if ran(e) else e.WhichOneof("event") for e in await stored()]
            if "ran" in kinds and "turn_complete" in kinds[kinds.index("ran") :]:
                break  # the tool ran and its turn ended
            await asyncio.sleep(0.5)
    assert kinds.count("ran") == 1  # exactly once
    pending = await rig.agent.ListPendingPermissions(
        agent_pb2.ListPendingPermissionsRequest(), metadata=rig.metadata
    )
    assert list(pending.pending) == []


ALLOW_HINT = re.compile(r"betcode permissions allow (\S+)")
short_token_rig = pytest.fixture(rig_fixture(BufferSettings(), access_token_seconds=6))


async def test_a_new_session_for_an_offline_machine_is_refused_at_once_saying_how_to_queue(
    rig: Rig, tmp_path: Path, workspace: Workspace
) -> None:
    """`run` without --session cannot wait in the relay's buffer (its answer streams back):
    it used to reconnect until --timeout, saying "reconnected", then exit 1 claiming the
    session went on, and the start it half-closed stayed buffered to make an empty session
    later. Now it exits 2 at once, saying the machine is offline and how to queue."""
    await rig.start_daemon()
    user = cli_user(rig, tmp_path, workspace)
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    assert (await user.run("--machine", MACHINE, "sessions", "list")).code == 0  # pins the key
    await rig.stop_daemon()

    ran = await user.run(
        "--machine", MACHINE, "run", "--timeout", "30", "--cwd", str(workspace.repo), "SCN:plain"
    )
    assert ran.code == 2, ran.err
    assert f"machine {MACHINE} is offline" in ran.err
    assert f"betcode --machine {MACHINE} run --session SESSION_ID TEXT" in ran.err
    assert "reconnect" not in ran.err
    assert rig.relay.buffer is not None
    assert await rig.relay.buffer.pending(MACHINE) == []  # nothing to start a session later


async def until_stored_token_expired(user: BetcodeUser) -> None:
    """Until the stored access token has expired (real time: the tokens are JWTs)."""
    login = json.loads((user.config_dir / "auth.json").read_text())
    await asyncio.sleep(max(0.0, login["access_expires_at"] - time.time()) + 0.5)


async def test_tokens_renew_for_a_long_chat_and_concurrent_commands_share_a_refresh(
    short_token_rig: Rig, tmp_path: Path, workspace: Workspace
) -> None:
    """Access tokens live 6 s here. A run kept open past that keeps working across a
    reconnect; five commands that all find the token due refresh it once between them (the
    refresh token rotates: a second use of the old one would revoke the login)."""
    rig = short_token_rig
    await rig.start_daemon()
    user = cli_user(rig, tmp_path, workspace)
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    first = json.loads((user.config_dir / "auth.json").read_text())
    running = await user.spawn("--machine", MACHINE, "run", "--output", "stream-json", BASH_PROMPT)
    request_id = await stderr_until(running, ALLOW_HINT)
    await asyncio.sleep(max(0.0, first["access_expires_at"] - time.time()) + 1)
    # The first token has expired. The daemon restarts: the run's stream drops and reconnects.
    await rig.stop_daemon(keep_sessions=True)
    rig.account = await login(rig.channel, "alice")  # the test's own token expired too
    await rig.start_daemon()

    await until_stored_token_expired(user)
    together = await asyncio.gather(
        *(user.run("--machine", MACHINE, "sessions", "list") for _ in range(5))
    )
    assert [done.code for done in together] == [0] * 5, [done.err for done in together]
    allowed = await user.run("--machine", MACHINE, "permissions", "allow", request_id)
    assert allowed.code == 0, allowed.err
    out, err = await asyncio.wait_for(running.communicate(), 90)
    assert running.returncode == 0, err.decode()
    assert "hello-from-bash" in out.decode()
    assert "reconnected to the daemon" in err.decode()
    status = await user.run("auth", "status")
    assert status.code == 0
    assert "logged in to" in status.out


def hiding(directory: Path) -> list[str]:
    """Runs a command in a mount namespace of its own where ``directory`` is an empty tmpfs:
    what is in it exists for the daemon only, as on another computer."""
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: no private mount namespace here: {probe.stderr!r}")
    script = f'mount -t tmpfs none {shlex.quote(str(directory))} && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


async def test_cwd_through_the_relay_is_a_folder_on_the_machine(
    rig: Rig, tmp_path: Path, workspace: Workspace
) -> None:
    await rig.start_daemon()
    only_there = workspace.repo / "service"
    only_there.mkdir()
    user = BetcodeUser(
        cli_user(rig, tmp_path, workspace).relay, tmp_path / "client-config", tmp_path
    )
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    wrapper = hiding(workspace.repo)
    ran = await user.run(
        "--machine", MACHINE, "run", "--cwd", str(only_there), "SCN:plain", wrapper=wrapper
    )
    assert ran.code == 0, ran.err
    listed = await user.run("--machine", MACHINE, "sessions", "list", "--json")
    assert str(only_there) in listed.out
    # A folder the machine does not have either: refused there, saying so.
    missing = await user.run(
        "--machine", MACHINE, "run", "--cwd", str(workspace.repo / "nowhere"), "SCN:plain"
    )
    assert missing.code != 0
    assert "nowhere" in missing.err


AWAY = "SCN:plain said-while-the-machine-was-away"


def sent_to_model(mock_api: MockAnthropic, text: str) -> int:
    """The model's requests whose latest user turn holds `text` (one per sending)."""
    count = 0
    for request in mock_api.message_requests:
        user_turns = [m for m in (request.body or {}).get("messages", []) if m["role"] == "user"]
        count += bool(user_turns) and text in json.dumps(user_turns[-1])
    return count


async def session_events(rig: Rig, session_id: str) -> list[agent_pb2.AgentEvent]:
    request = agent_pb2.ResumeSessionRequest(session_id=session_id)
    return [e async for e in rig.agent.ResumeSession(request, metadata=rig.metadata)]


def inputs_of(events: list[agent_pb2.AgentEvent]) -> list[str]:
    return [e.user_input.content for e in events if e.WhichOneof("event") == "user_input"]


async def test_a_message_into_a_session_of_an_offline_machine_is_queued_and_sent_once(
    rig: Rig, tmp_path: Path, workspace: Workspace, mock_api: MockAnthropic
) -> None:
    await rig.start_daemon()
    user = cli_user(rig, tmp_path, workspace)
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    first = await user.run("--machine", MACHINE, "run", "--cwd", str(workspace.repo), "SCN:plain")
    assert first.code == 0, first.err
    [session] = (
        await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    ).sessions
    await rig.stop_daemon()

    queued = await user.run("--machine", MACHINE, "run", "--session", session.id, AWAY)
    assert queued.code == 0, queued.err
    assert f"queued on the relay until {MACHINE} reconnects" in queued.err
    assert rig.relay.buffer is not None
    [kept] = await rig.relay.buffer.pending(MACHINE)
    # Offline, a prefix cannot be looked up: refused, saying so, nothing queued.
    prefix = await user.run("--machine", MACHINE, "run", "--session", session.id[:8], AWAY)
    assert prefix.code == 2, prefix.err
    assert "full id" in prefix.err
    assert len(await rig.relay.buffer.pending(MACHINE)) == 1

    await rig.start_daemon()

    async def turn_ended() -> bool:
        kinds = [
            "away" if e.user_input.content == AWAY else e.WhichOneof("event")
            for e in await session_events(rig, session.id)
        ]
        return "away" in kinds and "turn_complete" in kinds[kinds.index("away") :]

    await until(turn_ended, 90)
    assert not await rig.relay.buffer.pending(MACHINE)  # deleted once the daemon recorded it

    # The relay delivers the same buffered request again (as one restarted before it deleted
    # it would): refused as a replay of its sealed call, nothing is sent again.
    assert rig.relay.nc is not None
    await rig.relay.nc.jetstream().publish(kept.subject, kept.data, headers=kept.headers)
    await rig.stop_daemon()
    await rig.start_daemon()

    async def redelivered() -> bool:
        assert rig.relay.buffer is not None
        return not await rig.relay.buffer.pending(MACHINE)

    await until(redelivered, 60)
    assert inputs_of(await session_events(rig, session.id)).count(AWAY) == 1

    # The message again with its key, in a call that passes the replay check (a new sealed
    # call): the daemon recognises the key recorded with the line, ends the call (recorded)
    # and sends nothing.
    with sqlite3.connect(rig.config.data_dir / "daemon.db") as conn:
        (key,) = conn.execute(  # the latest: the first run's message had one too
            "SELECT key FROM processed_idempotency_keys WHERE session_id = ? "
            "ORDER BY processed_at DESC LIMIT 1",
            (session.id,),
        ).fetchone()
    again = [
        agent_pb2.AgentRequest(start=agent_pb2.StartConversation(session_id=session.id)),
        agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=AWAY, idempotency_key=key)),
    ]
    answers = [
        event
        async for event in rig.agent.Converse(
            iter(again), metadata=(*rig.metadata, (ACK_METADATA, ACK_RECORDED))
        )
    ]
    assert [e for e in answers if e.WhichOneof("event") == "error"] == []
    await asyncio.sleep(2)  # a turn it wrongly started would have reached the model by now
    assert inputs_of(await session_events(rig, session.id)).count(AWAY) == 1
    assert sent_to_model(mock_api, "said-while-the-machine-was-away") == 1


async def test_a_10_mb_answer_reaches_the_command_line_whole_through_the_relay(
    rig: Rig, tmp_path: Path, workspace: Workspace
) -> None:
    """An event over NATS's 8 MiB (the fake claude's one 10 MB assistant line) reaches a relayed
    `betcode run` whole, in slices between the relay's ends; the run then finishes."""
    big = 10_000_000
    script = {"turns": [[{"do": "big_line", "bytes": big}]]}
    rig.config = replace(rig.config, claude_bin=str(make_fake_claude(tmp_path / "fake", script)))
    await rig.start_daemon()
    user = cli_user(rig, tmp_path, workspace)
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    started = time.monotonic()
    ran = await user.run("--machine", MACHINE, "run", "a long answer, please")
    print(f"\nbetcode run of a 10 MB answer through the relay: {time.monotonic() - started:.2f} s")
    assert ran.code == 0, ran.err[-2000:]
    assert "y" * big in ran.out
