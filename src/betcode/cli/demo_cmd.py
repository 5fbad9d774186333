"""`betcode demo`: the whole flow offline — the daemon, the pinned real Claude Code CLI and the
bundled mock model: streamed text, a tool call, a permission prompt answered, then a replay.
With --chat the same prompt opens in `betcode chat`, and the user answers the prompt.

Everything lives in a temporary folder (HOME, data, socket); nothing of the user's is touched.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import click
import grpc

from betcode.claude.locate import find_claude_binary
from betcode.cli.chat import ChatOptions, run_chat
from betcode.cli.chat.model import struct_to_dict
from betcode.cli.chat.texts import tool_summary
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2

DEMO_PROMPT = (
    'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\"", "description": "Multiply 6 by 7"}'
    " What is 6 times 7?"
)
STARTUP_TIMEOUT_S = 30.0
TURN_TIMEOUT_S = 120.0


@click.command("demo")
@click.option("--chat", "in_chat", is_flag=True, help="Answer the tool call yourself, in the chat.")
def demo(in_chat: bool) -> None:
    """Run the daemon with the real Claude Code CLI against the offline mock model."""
    _leave_through_finally_on(signal.SIGHUP, signal.SIGTERM)
    try:
        _run_demo(in_chat)
    except SystemExit as leaving:
        if leaving.code in (128 + signal.SIGHUP, 128 + signal.SIGTERM):
            # Cleaned up already (daemon stopped, scratch folder deleted). With the terminal
            # gone, the chat's input thread spins on the dead terminal and would keep the
            # interpreter from ever exiting: leave without waiting for it.
            os._exit(int(leaving.code))
        raise


def _run_demo(in_chat: bool) -> None:
    binary = find_claude_binary(None, {"PATH": ""})  # the project's pinned copy, never a global one
    with tempfile.TemporaryDirectory(prefix="betcode-demo-") as scratch, MockAnthropic() as mock:
        root = Path(scratch)
        work = root / "project"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=False)
        socket = root / "run" / "daemon.sock"
        env = _demo_environment(root, mock.base_url, str(binary.path), socket)
        click.secho(f"▶ mock model (offline) at {mock.base_url}", fg="cyan")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(root / "daemon.log", "wb"),  # noqa: SIM115 - closed with the process
        )
        try:
            _wait_for_socket(socket, daemon)
            click.secho(
                f"▶ daemon pid {daemon.pid} on {socket} (claude at {binary.path})", fg="cyan"
            )
            if in_chat:
                options = ChatOptions(
                    socket=str(socket), cwd=work, first_message=DEMO_PROMPT, reattach_hint=False
                )
                run_chat(options)
            else:
                asyncio.run(_conversation(socket, work))
        finally:
            daemon.terminate()
            daemon.wait(timeout=15)
            click.secho("▶ daemon stopped", fg="cyan")


def _leave_through_finally_on(*signals: signal.Signals) -> None:
    """Closing the terminal (SIGHUP) or `kill` (SIGTERM) ends the demo through its ``finally``,
    which stops the demo's daemon: left alone it would outlive the demo (a daemon reloads its
    permission rules on SIGHUP, it does not stop)."""

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for number in signals:
        signal.signal(number, leave)


def _demo_environment(root: Path, base_url: str, claude: str, socket: Path) -> dict[str, str]:
    home = root / "home"
    home.mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "offline-demo-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "BETCODE_CLAUDE_BIN": claude,
        "BETCODE_SOCKET": str(socket),
        "BETCODE_DATA_DIR": str(root / "data"),
        "BETCODE_CONFIG_DIR": str(root / "config"),
    }


def _wait_for_socket(socket: Path, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not socket.exists():
        if daemon.poll() is not None:
            raise click.ClickException(f"the daemon exited with code {daemon.returncode}")
        if time.monotonic() > deadline:
            raise click.ClickException("the daemon did not start in time")
        time.sleep(0.05)


async def _conversation(socket: Path, work: Path) -> None:
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        outbox: asyncio.Queue[agent_pb2.AgentRequest] = asyncio.Queue()
        outbox.put_nowait(
            agent_pb2.AgentRequest(start=agent_pb2.StartConversation(working_directory=str(work)))
        )
        outbox.put_nowait(
            agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=DEMO_PROMPT))
        )

        async def requests() -> AsyncIterator[agent_pb2.AgentRequest]:
            while True:
                yield await outbox.get()

        click.secho(f"you> {DEMO_PROMPT}", fg="green")
        call = stub.Converse(requests(), metadata=(("x-client-id", "demo"),))
        session_id, last_seq = await asyncio.wait_for(_show(call, outbox), TURN_TIMEOUT_S)
        call.cancel()
        replayed = await _replayed_sequences(stub, session_id)
        contiguous = replayed == list(range(1, len(replayed) + 1))
        click.secho(
            f"▶ replay: {len(replayed)} events read back from SQLite (sequences 1–"
            f"{replayed[-1] if replayed else 0}, {'no gap' if contiguous else 'NOT contiguous'}); "
            f"the live stream showed up to {last_seq}, the rest came as the session settled",
            fg="cyan",
        )


async def _replayed_sequences(stub: agent_pb2_grpc.AgentServiceStub, session_id: str) -> list[int]:
    sequences: list[int] = []
    async for batch in stub.ResumeSessionBatched(
        agent_pb2.ResumeSessionRequest(session_id=session_id, follow=False)
    ):
        if not batch.events:  # the live edge
            break
        sequences.extend(event.sequence for event in batch.events)
    return sequences


async def _show(call: object, outbox: asyncio.Queue[agent_pb2.AgentRequest]) -> tuple[str, int]:
    session_id, last_seq, writing = "", 0, False
    async for event in call:  # type: ignore[attr-defined]
        last_seq = max(last_seq, event.sequence)
        kind = event.WhichOneof("event")
        if kind == "session_info" and not session_id:
            session_id = event.session_info.session_id
            click.secho(f"▶ session {session_id}", fg="cyan")
        elif kind == "text_delta":
            if not writing:
                click.secho("claude> ", fg="magenta", nl=False)
                writing = True
            click.echo(event.text_delta.text, nl=False)
            if event.text_delta.is_complete:
                click.echo()
                writing = False
        elif kind == "tool_call_start":
            start = event.tool_call_start
            summary = tool_summary(start.tool_name, struct_to_dict(start.input))
            click.secho(f"⚙ tool call {start.tool_name}({summary})", fg="yellow")
        elif kind == "permission_request":
            request = event.permission_request
            click.secho(
                f"? permission for {request.tool_name} "
                f"({request.description}) → answering: allow once",
                fg="yellow",
            )
            outbox.put_nowait(
                agent_pb2.AgentRequest(
                    permission=agent_pb2.PermissionResponse(
                        request_id=request.request_id,
                        decision=common_pb2.PermissionDecision.PERMISSION_DECISION_ALLOW_ONCE,
                    )
                )
            )
        elif kind == "tool_call_result":
            result = event.tool_call_result
            mark = "✗" if result.is_error else "✓"
            click.secho(f"{mark} tool result: {result.output.strip()}", fg="yellow")
        elif kind == "usage":
            usage = event.usage
            click.secho(
                f"▶ usage: {usage.input_tokens} in / {usage.output_tokens} out tokens, "
                f"${usage.cost_usd:.5f}",
                fg="cyan",
            )
        elif kind == "turn_complete":
            click.secho(f"▶ turn complete ({event.turn_complete.stop_reason})", fg="cyan")
            return session_id, last_seq
        elif kind == "error":
            click.secho(f"! {event.error.code}: {event.error.message}", fg="red")
    raise click.ClickException("the conversation stream ended before the turn completed")
