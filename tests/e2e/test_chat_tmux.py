"""`betcode chat` in a real terminal: tmux runs it against a real daemon (the pinned real CLI,
the mock model); keys go in with send-keys, the screen comes back with capture-pane.

What a user does first: paste a request for a tool, approve it, see its result and the answer,
quit, reattach with `--continue` and find the whole conversation again. Then: two terminals on
one session, `betcode chat` with no daemon (offered to start one), the README's demo, and the
palette (`/` lists the commands, `/compact` compacts, `@` completes a path sent in the prompt).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
from harness.daemon import InProcessDaemon
from harness.environment import Workspace

from betcode.cli.chat.screens import PERMISSION_ANSWERS
from betcode.cli.chat_cmd import START_DAEMON_QUESTION

pytestmark = [
    pytest.mark.real_cli,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

COLUMNS, ROWS = 120, 40
SCREEN_TIMEOUT_S = 60.0  # a bound for a loaded machine; each wait normally ends in a second
POLL_S = 0.1
PROMPT = 'SCN:tool_bash {"command": "touch made-in-tmux.txt && echo made-by-tmux"} make a file'
TOOL_TITLE = "✓ Bash(touch made-in-tmux.txt && echo made-by-tmux)"
FINAL_TEXT = "ok: made-by-tmux"  # the mock model's answer quotes the tool result it received
INPUT_PLACEHOLDER = "Message claude"
PASTED_LINE = "(the second line of a pasted message)"
SESSION = "chat"
EXIT_MARK = "[chat exited: "


class Terminal:
    """A private tmux server (its own socket name, so no one else's tmux is touched) with one
    session; each ``open`` runs a command in a new window of it."""

    def __init__(self, server: str, config: Path) -> None:
        self.server = server
        self.config = config
        self.size = (COLUMNS, ROWS)  # columns, rows: set before the first ``open``
        self._windows = 0

    async def tmux(self, *args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "tmux", "-u", "-L", self.server, "-f", str(self.config), *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)} failed: {err.decode().strip()}")
        return out.decode()

    async def open(self, command: list[str], cwd: Path) -> Window:
        """Runs ``command`` in a new window. The shell around it prints its exit status and
        keeps the window open (tmux 3.3's own remain-on-exit sometimes never notices a
        pane's process ending)."""
        shell = f'{shlex.join(command)}; echo "{EXIT_MARK}$?]"; exec sleep 600'
        name = f"w{self._windows}"
        if self._windows:
            await self.tmux("new-window", "-t", SESSION, "-n", name, "-c", str(cwd), shell)
        else:
            size = ["-x", str(self.size[0]), "-y", str(self.size[1])]
            where = ["-s", SESSION, "-n", name, "-c", str(cwd)]
            await self.tmux("new-session", "-d", *size, *where, shell)
        self._windows += 1
        return Window(self, f"{SESSION}:{name}")


class Window:
    """One window: keys in (send-keys), the screen out (capture-pane)."""

    def __init__(self, terminal: Terminal, target: str) -> None:
        self.terminal = terminal
        self.target = target

    async def keys(self, *keys: str, literal: bool = False) -> None:
        flags = ["-l"] if literal else []
        await self.terminal.tmux("send-keys", "-t", self.target, *flags, *keys)

    async def paste(self, text: str) -> None:
        """Pastes ``text`` as a terminal does: bracketed, so new lines in it are not Enter."""
        await self.terminal.tmux("set-buffer", "-b", "clip", text)
        await self.terminal.tmux("paste-buffer", "-p", "-d", "-b", "clip", "-t", self.target)

    async def screen(self, *, with_scrollback: bool = False) -> str:
        start = ["-S", "-"] if with_scrollback else []
        return await self.terminal.tmux("capture-pane", "-p", "-t", self.target, *start)

    async def wait_for(self, *texts: str, absent: str | None = None) -> str:
        """Polls the screen until every text is on it (and ``absent`` is not); fails with the
        last screen after SCREEN_TIMEOUT_S."""
        deadline = asyncio.get_running_loop().time() + SCREEN_TIMEOUT_S
        while True:
            screen = await self.screen()
            if all(text in screen for text in texts) and (absent is None or absent not in screen):
                return screen
            if asyncio.get_running_loop().time() > deadline:
                missing = [text for text in texts if text not in screen]
                raise AssertionError(f"never on screen: {missing} (absent: {absent})\n{screen}")
            await asyncio.sleep(POLL_S)

    async def wait_for_exit(self) -> tuple[int, str]:
        """The command's exit status and everything it left in the window."""
        await self.wait_for(EXIT_MARK)
        screen = await self.screen(with_scrollback=True)
        status = re.search(re.escape(EXIT_MARK) + r"(\d+)\]", screen)
        assert status is not None, screen
        return int(status.group(1)), screen


@pytest.fixture
async def terminal(tmp_path: Path) -> AsyncIterator[Terminal]:
    config = tmp_path / "tmux.conf"
    config.write_text("set -g status off\n")
    terminal = Terminal(f"betcode-test-{uuid.uuid4().hex[:12]}", config)
    try:
        yield terminal
    finally:
        with contextlib.suppress(RuntimeError):  # no server: nothing was started
            await terminal.tmux("kill-server")


def client_environment(root: Path, socket: Path, **extra: str) -> dict[str, str]:
    """All a `betcode` client process gets: nothing of the developer's own set-up."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "HOME": str(root / "client-home"),
        "BETCODE_CONFIG_DIR": str(root / "client-config"),
        "BETCODE_SOCKET": str(socket),
        **extra,
    }


def betcode(environment: dict[str, str], *args: str) -> list[str]:
    assignments = [f"{name}={value}" for name, value in environment.items()]
    return ["env", "-i", *assignments, sys.executable, "-m", "betcode.cli.main", *args]


def chat_command(daemon: InProcessDaemon, tmp_path: Path, *args: str) -> list[str]:
    return betcode(client_environment(tmp_path, daemon.socket), "chat", *args)


async def test_approve_a_tool_quit_and_continue_with_the_history(
    daemon: InProcessDaemon, workspace: Workspace, terminal: Terminal, tmp_path: Path
) -> None:
    chat = await terminal.open(chat_command(daemon, tmp_path), workspace.repo)
    await chat.wait_for(INPUT_PLACEHOLDER, "ready")

    await chat.paste(f"{PROMPT}\n{PASTED_LINE}")  # two lines in, nothing sent yet
    await chat.wait_for(PROMPT, PASTED_LINE, "ready")
    await chat.keys("Enter")
    screen = await chat.wait_for("Allow Bash?", "y  Allow once", "waiting for you")
    assert "touch made-in-tmux.txt && echo made-by-tmux" in screen  # the input, shown to judge
    assert not (workspace.repo / "made-in-tmux.txt").exists()  # nothing runs before approval

    await chat.keys("y")
    screen = await chat.wait_for(TOOL_TITLE, "⎿ made-by-tmux", FINAL_TEXT, absent="Allow")
    await chat.wait_for("ready")
    assert (workspace.repo / "made-in-tmux.txt").exists()  # the approved command really ran
    assert screen.count(PROMPT) == 1
    lines = screen.splitlines()
    after_prompt = lines[next(n for n, line in enumerate(lines) if PROMPT in line) + 1]
    assert PASTED_LINE in after_prompt  # one message of two lines, not two messages

    await chat.keys("C-c")  # nothing is running: one Ctrl-C quits
    status, screen = await chat.wait_for_exit()
    goodbye = " ".join(screen.split())
    assert status == 0
    assert "keeps running in the daemon" in goodbye
    assert "betcode chat --continue" in goodbye

    chat = await terminal.open(chat_command(daemon, tmp_path, "--continue"), workspace.repo)
    history = (PROMPT, TOOL_TITLE, "⎿ made-by-tmux", "Bash: allowed", FINAL_TEXT)
    screen = await chat.wait_for(*history)
    for text in history:
        assert screen.count(text) == 1, f"shown {screen.count(text)} times: {text}"
    assert screen.index(PROMPT) < screen.index(TOOL_TITLE) < screen.index(FINAL_TEXT)

    await chat.keys("C-q")
    status, _ = await chat.wait_for_exit()
    assert status == 0


async def test_two_terminals_share_one_session_live(
    daemon: InProcessDaemon, workspace: Workspace, terminal: Terminal, tmp_path: Path
) -> None:
    first = await terminal.open(chat_command(daemon, tmp_path, "SCN:plain hello"), workspace.repo)
    await first.wait_for("Hello from the mock model.", "ready", "input lock: you")
    second = await terminal.open(chat_command(daemon, tmp_path, "--continue"), workspace.repo)
    screen = await second.wait_for("Hello from the mock model.", "read-only: you")
    assert "press ctrl+l to request it" in " ".join(screen.split())

    await second.keys("typed without the lock", literal=True)
    await second.keys("Enter")  # refused here: it stays in the input, nothing is sent
    await first.keys(PROMPT, literal=True)
    await first.keys("Enter")
    await first.wait_for("Allow Bash?")
    screen = await second.wait_for(PROMPT, "waiting for you")  # live, as the holder sends it
    assert "Allow Bash?" not in screen  # only the holder is asked
    await first.keys("y")
    for window in (first, second):
        screen = await window.wait_for(TOOL_TITLE, "⎿ made-by-tmux", FINAL_TEXT, "ready")
        assert screen.count(PROMPT) == 1
    assert "typed without the lock" not in await first.screen()
    assert (await second.screen()).count("typed without the lock") == 1  # still in its input


@pytest.fixture
def no_daemon(
    tmp_path_factory: pytest.TempPathFactory, claude_bin: Path
) -> Iterator[dict[str, str]]:
    """A client environment whose daemon socket nobody listens on; a daemon started from it
    (detached, by `betcode chat`) is stopped at teardown."""
    root = tmp_path_factory.mktemp("nd")  # short: a socket path holds at most 107 bytes
    environment = client_environment(
        root,
        root / "run" / "daemon.sock",
        BETCODE_DATA_DIR=str(root / "data"),
        BETCODE_CLAUDE_BIN=str(claude_bin),
    )
    yield environment
    subprocess.run(betcode(environment, "daemon", "stop"), capture_output=True, timeout=30)


async def daemon_running(environment: dict[str, str]) -> bool:
    argv = betcode(environment, "daemon", "status")
    status = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL)
    return await status.wait() == 0


async def test_no_daemon_the_chat_offers_to_start_it(
    no_daemon: dict[str, str], terminal: Terminal, tmp_path: Path
) -> None:
    chat = await terminal.open(betcode(no_daemon, "chat"), tmp_path)
    await chat.wait_for("BetCode daemon is not running", f"{START_DAEMON_QUESTION} [Y/n]")
    await chat.keys("y", "Enter")
    await chat.wait_for(INPUT_PLACEHOLDER, "ready")  # attached to a new session
    assert await daemon_running(no_daemon)
    await chat.keys("C-q")
    status, _ = await chat.wait_for_exit()
    assert status == 0


async def test_no_daemon_and_the_offer_declined_exits_2(
    no_daemon: dict[str, str], terminal: Terminal, tmp_path: Path
) -> None:
    chat = await terminal.open(betcode(no_daemon, "chat"), tmp_path)
    await chat.wait_for(f"{START_DAEMON_QUESTION} [Y/n]")
    await chat.keys("n", "Enter")
    status, screen = await chat.wait_for_exit()
    assert status == 2
    assert "betcode daemon start" in screen
    assert not await daemon_running(no_daemon)


@pytest.mark.usefixtures("claude_bin")  # the demo runs the pinned CLI: fail if it is missing
async def test_demo_in_the_chat_is_one_approval_away(terminal: Terminal, tmp_path: Path) -> None:
    """README's quick start after set-up: `betcode demo --chat`, press y, see the result; in
    a classic 80x24 terminal, where every answer of the prompt must still be on screen."""
    terminal.size = (80, 24)
    environment = client_environment(tmp_path, tmp_path / "unused.sock")
    chat = await terminal.open(betcode(environment, "demo", "--chat"), tmp_path)
    answers = [label for label, _action, _variant in PERMISSION_ANSWERS]
    await chat.wait_for("Allow Bash?", 'command: python3 -c "print(6 * 7)"', *answers)
    await chat.keys("y")
    await chat.wait_for('✓ Bash(python3 -c "print(6 * 7)")', "⎿ 42", "ok: 42", "ready")
    await chat.keys("C-c")
    status, screen = await chat.wait_for_exit()
    assert status == 0
    assert "daemon stopped" in screen
    assert "keeps running" not in screen  # the demo's daemon ends with it: no reattach hint


def demo_daemons(scratch: Path) -> list[psutil.Process]:
    """The daemons of demos whose temporary folders are under ``scratch``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "daemon" in (process.info["cmdline"] or []):
                socket = process.environ().get("BETCODE_SOCKET", "")
                if socket.startswith(f"{scratch}/betcode-demo-"):
                    found.append(process)
    return found


def demo_processes(scratch: Path) -> list[psutil.Process]:
    """The `betcode demo` processes running in ``scratch``."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        command = process.info["cmdline"] or []
        if (
            "betcode.cli.main" in command
            and "demo" in command
            and process.info["cwd"] == str(scratch)
        ):
            found.append(process)
    return found


@pytest.mark.usefixtures("claude_bin")
async def test_closing_the_terminal_during_the_demo_stops_its_daemon(
    terminal: Terminal, tmp_path_factory: pytest.TempPathFactory
) -> None:
    scratch = tmp_path_factory.mktemp("d")  # short: the demo's socket lives under it
    environment = client_environment(scratch, scratch / "unused.sock", TMPDIR=str(scratch))
    chat = await terminal.open(betcode(environment, "demo", "--chat"), scratch)
    await chat.wait_for("Allow Bash?")
    daemons = await asyncio.to_thread(demo_daemons, scratch)
    assert len(daemons) == 1
    demos = await asyncio.to_thread(demo_processes, scratch)
    assert len(demos) == 1
    await terminal.tmux("kill-server")  # the terminal window goes away: SIGHUP
    # The demo's daemon stops, and so does the demo itself (its chat once spun on the dead
    # terminal forever).
    _gone, alive = await asyncio.to_thread(psutil.wait_procs, [*daemons, *demos], 30)
    for process in alive:
        process.kill()  # a failed run must not leave it behind either
    assert not alive


async def test_palette_lists_commands_compacts_and_completes_a_path(
    daemon: InProcessDaemon, workspace: Workspace, terminal: Terminal, tmp_path: Path
) -> None:
    commands = workspace.repo / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "shipit.md").write_text("---\ndescription: Ship the release now\n---\nShip.\n")
    (workspace.repo / "src").mkdir()
    (workspace.repo / "src" / "palette_target.py").write_text("print('target')\n")
    chat = await terminal.open(chat_command(daemon, tmp_path), workspace.repo)
    await chat.wait_for(INPUT_PLACEHOLDER, "ready")

    await chat.keys("/", literal=True)
    await chat.wait_for("/compact", "/clear", "/model", "/shipit", "Ship the release now")
    await chat.keys("shi", literal=True)
    await chat.wait_for("/shipit", absent="/compact")
    await chat.keys("Escape", "BSpace", "BSpace", "BSpace", "BSpace")
    await chat.wait_for(INPUT_PLACEHOLDER, absent="/shipit")

    # `@` completes a path below the session's directory; Tab takes it into the message.
    await chat.keys("read @src/pal", literal=True)
    await chat.wait_for("@src/palette_target.py")
    await chat.keys("Tab")
    await chat.keys("please", literal=True)
    await chat.wait_for("read @src/palette_target.py please")
    await chat.keys("Enter")
    await chat.wait_for("Hello from the mock model.", "ready")
    with sqlite3.connect(daemon.config.data_dir / "daemon.db") as conn:
        sent = [p for (p,) in conn.execute("SELECT payload FROM messages WHERE direction = 'in'")]
    assert any("read @src/palette_target.py please" in payload for payload in sent)

    await chat.keys("/compact", literal=True)
    await chat.keys("Enter")
    await chat.wait_for("Compacting the conversation")
    async with asyncio.timeout(SCREEN_TIMEOUT_S):
        while not compacted(daemon):  # noqa: ASYNC110 - claude's lines land in SQLite
            await asyncio.sleep(POLL_S)
    await chat.wait_for("ready")
    await chat.keys("C-q")
    status, _ = await chat.wait_for_exit()
    assert status == 0


def compacted(daemon: InProcessDaemon) -> bool:
    """claude ran its own /compact: its `local_command: compact` result is stored."""
    with sqlite3.connect(daemon.config.data_dir / "daemon.db") as conn:
        rows = conn.execute(
            "SELECT payload FROM messages WHERE direction = 'out' AND payload LIKE '%compact%'"
        ).fetchall()
    return any('"local_command":"compact"' in payload for (payload,) in rows)
