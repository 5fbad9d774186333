"""The supervisor of one session's claude process.

    IDLE ─ensure_running/send→ SPAWNING → RUNNING ─exit 0 / stop / idle reap→ (STOPPING →) IDLE
                                            └─crash (exit ≠ 0, signal, watchdog)→ RESTARTING
    RESTARTING ─after the backoff, respawn with --resume→ RUNNING
    RESTARTING ─max_crashes within window_seconds→ CRASHED ─reset()→ IDLE
    RUNNING ─a --resume found no conversation→ RESTARTING ─at once, a new conversation→ RUNNING

CRASHED waits for manual action: the session calls reset() when the user sends a new message,
which starts claude again (with --resume) on a fresh crash budget.

A claude stopped before it saved its conversation (it saves a turn's prompt shortly after the
turn starts) leaves nothing to resume: `--resume` then exits 1 at startup with "No conversation
found" (docs/PROTOCOL.md#process-lifecycle), and would again at every restart. So the next claude
starts a new conversation under the same id (`--session-id`), without the earlier context, and the
session tells its clients. That is no crash of claude: it is not counted, and nothing repeats
it, since claude starts anew until it was given input (which it then saves).

An exit we asked for (stop, idle reaping) is never a crash: at EOF the CLI exits 1 when the
last result was an error (docs/PROTOCOL.md#process-lifecycle). The watchdog only counts silence
while a turn is running and no permission request is waiting for a human; a process that was given
no input
yet runs no turn, whatever the session believes (a respawned one waits for its next message).
Each supervisor owns its process, tasks and crash window: one session's crashes never touch
another's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.command import CommandOptions, build_argv_from
from betcode.claude.holder.client import HeldClaude, HolderPlace, StdinJournal, StdoutMark
from betcode.claude.locate import ClaudeBinary
from betcode.claude.process import ClaudeProcess, ClaudeStdinClosed, describe_returncode
from betcode.observability.hooks import observer
from betcode.protocol.framing import Line

logger = logging.getLogger(__name__)

# What claude prints (stderr, and in its startup `result`) for a --resume of a conversation it
# has no saved record of, then it exits 1.
NO_CONVERSATION = "No conversation found with session ID: {}"

MAX_MONITOR_TICK = 1.0
MIN_MONITOR_TICK = 0.005


class SupervisorState(enum.StrEnum):
    IDLE = "idle"
    SPAWNING = "spawning"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    CRASHED = "crashed"


class SupervisorHooks(Protocol):
    """What the session tells the supervisor, and hears from it. All called on the loop."""

    def on_lines(self, lines: list[Line], mark: StdoutMark | None = None) -> None: ...
    def on_state(self, state: SupervisorState, detail: str) -> None: ...
    def resume_session_id(self) -> str | None: ...
    def turn_in_progress(self) -> bool: ...
    def permission_pending(self) -> bool: ...
    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None: ...
    def on_conversation_lost(self, claude_session_id: str) -> None: ...


class SupervisorCrashed(Exception):
    """claude crashed too often; it runs again only after reset() (manual action)."""


EnvBuilder = Callable[[], Mapping[str, str]]
RunningClaude = ClaudeProcess | HeldClaude


@dataclass(frozen=True, slots=True)
class Holding:
    """Start claude under a holder (it then outlives the daemon); `session_id` names it,
    `journal` keeps its stdin lines until the holder took them."""

    place: HolderPlace
    session_id: str
    journal: StdinJournal | None = None


class ClaudeSupervisor:
    def __init__(
        self,
        binary: ClaudeBinary,
        cwd: Path,
        env_builder: EnvBuilder,
        policy: SupervisorPolicy,
        hooks: SupervisorHooks,
        *,
        options: CommandOptions | None = None,
        worktree: bool = False,
        holding: Holding | None = None,
    ) -> None:
        self.binary = binary
        self.holding = holding
        self.cwd = cwd
        self.worktree = worktree  # cwd is a git worktree: never start claude if it is gone
        self.policy = policy
        # Read at every spawn: a model change made through the session applies on respawn.
        self.command_options = options or CommandOptions()
        self._env_builder = env_builder
        # Added to the built environment at every spawn (a subagent's checked `env`).
        self.extra_env: Mapping[str, str] = {}
        self._hooks = hooks
        self._state = SupervisorState.IDLE
        self._state_changed = asyncio.Event()
        self._crash_window = policy.crash_window()
        self._crashed_detail = ""
        self._process: RunningClaude | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._stop_requested: RunningClaude | None = None
        self._kill_reason: tuple[RunningClaude, str] | None = None
        self._last_input_at = time.monotonic()
        self._given_input: RunningClaude | None = None
        # The process started with --resume, and the conversation it was asked to resume.
        self._resuming: tuple[RunningClaude, str] | None = None
        # A conversation claude has no record of: started anew (not resumed) until the process
        # started so is given input, as claude then saves it.
        self._start_anew: str | None = None
        self._started_anew: RunningClaude | None = None
        # The process running now was found under its holder at startup, not spawned by us.
        self.reattached = False  # the process that was written to

    # -- public -----------------------------------------------------------------------------
    @property
    def state(self) -> SupervisorState:
        return self._state

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def resumed_conversation(self) -> str | None:
        """The conversation the running claude was started to resume (--resume); None for one
        that started a conversation, or was found under its holder."""
        if self._resuming is None or self._resuming[0] is not self._process:
            return None
        return self._resuming[1]

    async def ensure_running(self) -> None:
        """Return once a claude process is RUNNING (spawning one if IDLE, waiting out a
        restart). Raises SupervisorCrashed when CRASHED, or the spawn error."""
        while self._state is not SupervisorState.RUNNING:
            if self._state is SupervisorState.CRASHED:
                raise SupervisorCrashed(self._crashed_detail)
            if self._state is SupervisorState.IDLE:
                await self._spawn()
            else:
                await self._next_state_change()

    async def send(self, line: bytes) -> None:
        """Write one NDJSON line to claude, starting it if needed. If the process dies under
        the write, the line goes to its successor once the restart is done."""
        for attempt in (1, 2):
            await self.ensure_running()
            process = self._process
            if process is None:
                raise RuntimeError("RUNNING without a process")
            self._last_input_at = time.monotonic()
            try:
                await process.write(line)
            except ClaudeStdinClosed:
                if attempt == 2:
                    raise
                await self._exit_handled(process)
            else:
                self._last_input_at = time.monotonic()
                self._given_input = process
                if process is self._started_anew:
                    self._start_anew = None
                return

    def runs(self, pid: int | None) -> bool:
        """Whether claude process `pid` is the one RUNNING now (not stopping, not replaced)."""
        process = self._process
        return self._state is SupervisorState.RUNNING and process is not None and process.pid == pid

    async def write_to(self, pid: int | None, line: bytes) -> bool:
        """Write one NDJSON line to claude process `pid` while it is the one running. Unlike
        `send`, never starts claude, waits out a restart or hands the line to a successor: an
        answer to a request (or an interrupt) means nothing to any other process, and would
        start a claude that was stopped. False when the line was not taken."""
        process = self._process
        if process is None or not self.runs(pid):
            return False
        try:
            await process.write(line)
        except ClaudeStdinClosed as error:
            logger.info("%s; a line for it is dropped", error)
            return False
        self._last_input_at = time.monotonic()
        return True

    async def stop(self) -> None:
        """Stop claude cleanly → IDLE. No turn running: EOF on stdin (the CLI exits at once);
        a turn running: SIGTERM to the group. Either way SIGKILL after the grace period."""
        while True:
            state = self._state
            if state in (SupervisorState.IDLE, SupervisorState.CRASHED):
                return
            if state is SupervisorState.RESTARTING and self._restart is not None:
                self._restart.cancel()
                self._restart = None
                self._set_state(SupervisorState.IDLE, "stopped while waiting to restart")
                return
            if state is SupervisorState.RUNNING and self._process is not None:
                await self._stop_process(self._process, "stopping claude")
                return
            await self._next_state_change()

    async def force_restart(self, reason: str) -> None:
        """Kill the running claude (SIGTERM, grace, SIGKILL) and treat it as a crash: the
        next process resumes the conversation. Used by the watchdog and by callers that
        judge the stream broken (e.g. too many unparseable lines)."""
        process = self._process
        if self._state is not SupervisorState.RUNNING or process is None:
            return
        self._kill_reason = (process, reason)
        logger.warning("claude pid %d: %s; killing it", process.pid, reason)
        await process.terminate(self.policy.kill_grace_seconds)

    def adopt(self, process: HeldClaude) -> None:
        """Run on a claude found alive under its holder after a daemon restart. A turn that
        was running goes on (the watchdog counts its silence as for a process we wrote to)."""
        if self._state is not SupervisorState.IDLE:
            raise RuntimeError(f"adopt in state {self._state}")
        self.reattached = True
        self._run(process)
        if self._query("turn_in_progress", self._hooks.turn_in_progress, default=True):
            self._given_input = process

    def detach(self) -> None:
        """Leave claude running under its holder (the daemon stops, keeping sessions): stop
        watching it without any state change. A claude without a holder is left as is."""
        for task in (self._watcher, self._monitor, self._restart):
            if task is not None:
                task.cancel()
        if isinstance(self._process, HeldClaude):
            self._process.detach()

    def reset(self) -> None:
        """Leave CRASHED (manual action): forget the crashes, back to IDLE."""
        if self._state is SupervisorState.CRASHED:
            self._crash_window.clear()
            # If starting anew is what kept failing, resuming is tried again.
            self._start_anew = None
            self._set_state(SupervisorState.IDLE, "reset after crash")

    # -- spawning ---------------------------------------------------------------------------
    async def _start_process(self) -> RunningClaude:
        claude_session_id = self._hooks.resume_session_id()
        anew = claude_session_id is not None and claude_session_id == self._start_anew
        resume_id = None if anew else claude_session_id
        argv = build_argv_from(
            self.binary,
            self.command_options,
            resume_id,
            new_session_id=claude_session_id if anew else None,
        )
        process: RunningClaude
        if self.holding is None:
            process = ClaudeProcess(self._hooks.on_lines, max_line_bytes=self.policy.max_line_bytes)
        else:
            process = HeldClaude(
                self._hooks.on_lines,
                self.holding.place,
                self.holding.session_id,
                max_line_bytes=self.policy.max_line_bytes,
                journal=self.holding.journal,
            )
        started = time.monotonic()
        try:
            await process.start(
                argv,
                self.cwd,
                {**self._env_builder(), **self.extra_env, **observer().child_env()},
                worktree=self.worktree,
            )
        except BaseException:
            observer().claude_spawned("error", time.monotonic() - started)
            raise
        observer().claude_spawned("ok", time.monotonic() - started)
        self._resuming = None if resume_id is None else (process, resume_id)
        self._started_anew = process if anew else None
        logger.info(
            "claude pid %d started in %s%s",
            process.pid,
            self.cwd,
            f" resuming {resume_id}"
            if resume_id
            else f" as new conversation {claude_session_id}"
            if anew
            else "",
        )
        return process

    async def _spawn(self) -> None:
        self.reattached = False
        self._set_state(SupervisorState.SPAWNING, "starting claude")
        try:
            process = await self._start_process()
        except BaseException as error:
            self._set_state(SupervisorState.IDLE, f"claude did not start: {error}")
            raise
        self._run(process)

    def _run(self, process: RunningClaude) -> None:
        self._process = process
        self._last_input_at = time.monotonic()
        self._watcher = asyncio.create_task(self._watch(process), name=f"watch-{process.pid}")
        self._monitor = asyncio.create_task(self._guard(process), name=f"guard-{process.pid}")
        self._set_state(SupervisorState.RUNNING, f"claude pid {process.pid}")

    async def _restart_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self.reattached = False
        try:
            process = await self._start_process()
        except Exception as error:
            self._restart = None
            self._crashed(f"respawn failed: {error}")
            return
        self._restart = None
        self._run(process)

    # -- exits ------------------------------------------------------------------------------
    async def _watch(self, process: RunningClaude) -> None:
        returncode = await process.wait()
        self._process = None
        tail = process.stderr_tail
        self._call_hook("on_exit", self._hooks.on_exit, returncode, tail)
        kill_reason = self._kill_reason[1] if self._kill_reason else None
        self._kill_reason = None
        if self._stop_requested is process:
            self._stop_requested = None
            self._set_state(
                SupervisorState.IDLE, f"claude stopped ({describe_returncode(returncode)})"
            )
        elif kill_reason is not None:
            observer().claude_crashed(returncode)
            self._crashed(kill_reason, tail)
        elif isinstance(process, HeldClaude) and process.exited_unwatched:
            # As for a session without a holder: idle, resumed by the next message.
            self._set_state(
                SupervisorState.IDLE,
                f"claude had exited while no daemon ran ({describe_returncode(returncode)})",
            )
        elif returncode == 0:
            self._set_state(SupervisorState.IDLE, "claude exited normally")
        elif (lost := self._conversation_not_found(process, tail)) is not None:
            self._restart_anew(lost)
        else:
            observer().claude_crashed(returncode)
            self._crashed(f"claude {describe_returncode(returncode)}", tail)

    def _conversation_not_found(self, process: RunningClaude, stderr_tail: list[str]) -> str | None:
        """The conversation `process` failed to resume because claude has no record of it."""
        if self._resuming is None or self._resuming[0] is not process:
            return None
        conversation = self._resuming[1]
        return conversation if NO_CONVERSATION.format(conversation) in stderr_tail else None

    def _restart_anew(self, conversation: str) -> None:
        self._start_anew = conversation
        detail = (
            f"claude has no saved conversation {conversation} to resume (it was stopped before "
            "it saved any); starting a new conversation, without the earlier context"
        )
        logger.warning("claude for %s: %s", self.cwd, detail)
        self._call_hook("on_conversation_lost", self._hooks.on_conversation_lost, conversation)
        self._restart = asyncio.create_task(self._restart_after(0), name="claude-restart")
        self._set_state(SupervisorState.RESTARTING, detail)

    def _crashed(self, reason: str, stderr_tail: list[str] | None = None) -> None:
        now = time.monotonic()
        if stderr_tail:
            reason += f" (stderr: {stderr_tail[-1]})"
        if self._crash_window.record(now):
            self._crashed_detail = (
                f"{reason}; {self.policy.max_crashes} crashes within "
                f"{self.policy.window_seconds:g} s, not restarted automatically"
            )
            logger.error("claude for %s: %s", self.cwd, self._crashed_detail)
            self._set_state(SupervisorState.CRASHED, self._crashed_detail)
            return
        delay = self.policy.restart_delay(self._crash_window.count(now) - 1)
        logger.warning("claude for %s: %s; restarting in %.2f s", self.cwd, reason, delay)
        self._restart = asyncio.create_task(self._restart_after(delay), name="claude-restart")
        self._set_state(
            SupervisorState.RESTARTING, f"{reason}; restarting with --resume in {delay:g} s"
        )

    async def _stop_process(self, process: RunningClaude, reason: str) -> None:
        self._stop_requested = process
        self._set_state(SupervisorState.STOPPING, reason)
        grace = self.policy.kill_grace_seconds
        if self._query("turn_in_progress", self._hooks.turn_in_progress, default=True):
            await process.terminate(grace)
        else:
            process.close_stdin()
            if not await process.exited_within(grace):
                await process.terminate(grace)
        await self._exit_handled(process)

    async def _exit_handled(self, process: RunningClaude) -> None:
        """Wait until the watcher has dealt with `process`'s exit."""
        if self._process is process and self._watcher is not None:
            await asyncio.shield(self._watcher)

    # -- watchdog and idle reaping ----------------------------------------------------------
    def _tick(self) -> float:
        shortest = min(self.policy.watchdog_seconds, self.policy.idle_reap_seconds or float("inf"))
        return min(MAX_MONITOR_TICK, max(MIN_MONITOR_TICK, shortest / 4))

    async def _guard(self, process: RunningClaude) -> None:
        """Watchdog and idle reaper for one process; ends when the process exits.

        The session's answers are polled, so each clock restarts from the last tick at which
        it did not apply (a permission answered after an hour does not look like an hour of
        silence)."""
        started = time.monotonic()
        watchdog_paused_at = busy_at = started
        while process.returncode is None and self._process is process:
            await asyncio.sleep(self._tick())
            if self._state is not SupervisorState.RUNNING or self._process is not process:
                return
            now = time.monotonic()
            turn = self._given_input is process and self._query(
                "turn_in_progress", self._hooks.turn_in_progress, default=True
            )
            waiting = self._query(
                "permission_pending", self._hooks.permission_pending, default=True
            )
            if waiting or not turn:
                watchdog_paused_at = now
            if turn or waiting:
                busy_at = now
            heard_at = max(process.last_output_at, self._last_input_at)
            silent = now - max(heard_at, watchdog_paused_at)
            if silent >= self.policy.watchdog_seconds:
                await self.force_restart(f"no output for {silent:.1f} s while a turn was running")
                return
            reap_after = self.policy.idle_reap_seconds
            if reap_after is not None and now - max(heard_at, busy_at) >= reap_after:
                await self._stop_process(process, f"idle for {reap_after:g} s")
                return

    # -- plumbing ---------------------------------------------------------------------------
    def _set_state(self, state: SupervisorState, detail: str) -> None:
        self._state = state
        changed, self._state_changed = self._state_changed, asyncio.Event()
        changed.set()
        self._call_hook("on_state", self._hooks.on_state, state, detail)

    async def _next_state_change(self) -> None:
        await self._state_changed.wait()

    def _call_hook(self, name: str, hook: Callable[..., object], *args: object) -> None:
        try:
            hook(*args)
        except Exception:
            logger.exception("supervisor hook %s failed", name)

    def _query(self, name: str, hook: Callable[[], bool], *, default: bool) -> bool:
        try:
            return bool(hook())
        except Exception:
            logger.exception("supervisor hook %s failed; assuming %s", name, default)
            return default
