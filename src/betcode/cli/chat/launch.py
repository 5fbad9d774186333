"""`betcode chat`: find the daemon and the session, then run the full-screen app."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from betcode.cli.chat.app import ChatApp
from betcode.cli.connection import DaemonClient, SessionNotFound, resolve_daemon_address
from betcode.cli.conversation import ConversationStream
from betcode.cli.ids import find_session
from betcode.cli.worktree_target import open_worktree, session_branch


class NoSessionToContinue(SessionNotFound):
    """--continue found no session in the working directory."""


@dataclass(frozen=True)
class ChatOptions:
    socket: str | None = None  # --socket; None: BETCODE_SOCKET, then the default path
    session_id: str | None = None  # --session
    continue_last: bool = False  # --continue
    cwd: Path | None = None  # --cwd; None: the current directory
    model: str = ""  # --model; empty: the daemon's default
    first_message: str = ""  # PROMPT: sent as soon as the conversation is open
    worktree: str = ""  # --worktree: chat in this git worktree (made if missing)
    reattach_hint: bool = True  # say on quitting how to reattach (not when the daemon ends too)


async def pick_session(
    client: DaemonClient, options: ChatOptions, cwd: Path, worktree_id: str = ""
) -> str:
    """The session to attach to: --session (an id, unique prefix or name: `ids`), else with
    --worktree the worktree's session updated last (the task goes on where it was left), else
    with --continue the one updated last in ``cwd``, else none (a new session is made on the
    first message)."""
    if options.session_id:
        return (await find_session(client, options.session_id)).id
    if worktree_id:
        sessions = (await client.list_sessions(worktree_id=worktree_id)).sessions
        latest = max(sessions, key=lambda s: s.updated_at.ToNanoseconds(), default=None)
        return latest.id if latest is not None else ""
    if not options.continue_last:
        return ""
    latest = await client.most_recent_session(str(cwd))
    if latest is None:
        raise NoSessionToContinue(
            f"no BetCode session to continue in {cwd}; start one with `betcode chat`"
        )
    return latest.id


async def chat(options: ChatOptions) -> int:
    """Runs the chat until the user quits; returns the exit code (docs/CLI.md#exit-codes). Raises
    DaemonUnavailable before the screen opens when no daemon listens, and SessionNotFound
    when --continue finds nothing."""
    cwd = (options.cwd or Path.cwd()).resolve()
    address = resolve_daemon_address(options.socket)
    async with await DaemonClient.connect(address) as client:
        worktree = None
        if options.worktree:
            worktree = await open_worktree(client, options.worktree, str(cwd))
            cwd = Path(worktree.path)
        session_id = await pick_session(client, options, cwd, worktree.id if worktree else "")
        stream = ConversationStream(
            client,
            session_id=session_id,
            working_directory=str(cwd),
            model=options.model,
            worktree_id=worktree.id if worktree else "",
        )
        branch = worktree.branch if worktree else await session_branch(client, session_id)
        if options.first_message:
            await stream.send_message(options.first_message)  # written once the stream opens
        app = ChatApp(
            client,
            stream,
            reattach_hint=options.reattach_hint,
            branch=branch,
        )
        await app.run_async()
    return app.return_code or 0


def run_chat(options: ChatOptions) -> int:
    """The entry point for `betcode chat` (blocking)."""
    return asyncio.run(chat(options))
