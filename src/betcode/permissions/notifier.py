"""Reminders about requests still waiting for a human: an event, a log line, a user command.

The user-configured command (`daemon.permission.notify_command`, an argv such as
`["notify-send", "BetCode"]`) runs once per reminder with the request in its environment:

| variable | value |
|---|---|
| BETCODE_PERMISSION_REQUEST_ID | the request id (for `betcode permissions allow ID`) |
| BETCODE_PERMISSION_SESSION_ID | the session |
| BETCODE_PERMISSION_TOOL | the tool name, e.g. `Bash` |
| BETCODE_PERMISSION_DESCRIPTION | claude's description of the call (may be empty) |
| BETCODE_PERMISSION_INPUT | the tool input as JSON, cut at 4 KiB |
| BETCODE_PERMISSION_WAITING_SECONDS | how long it has been waiting, whole seconds |
| BETCODE_PERMISSION_EXPIRES_AT | when it will be denied, Unix seconds |
| BETCODE_PERMISSION_SUMMARY | one readable line with all of the above |

The command never blocks the daemon: it runs as a task, is killed after `timeout` seconds, and
a failure is logged, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from betcode.config.values import format_duration
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.spawn import PIPE, spawn

log = logging.getLogger(__name__)

MAX_INPUT_CHARS = 4096
STDERR_TAIL_CHARS = 500


@dataclass(frozen=True, slots=True)
class ReminderNotice:
    request_id: str
    session_id: str
    tool_name: str
    description: str
    input_json: str
    waiting_seconds: int
    expires_at: int

    def summary(self) -> str:
        what = f"{self.tool_name}: {self.description}" if self.description else self.tool_name
        return (
            f"permission request {self.request_id} ({what}) in session {self.session_id} "
            f"has waited {format_duration(self.waiting_seconds)}"
        )

    def environment(self) -> dict[str, str]:
        return {
            "BETCODE_PERMISSION_REQUEST_ID": self.request_id,
            "BETCODE_PERMISSION_SESSION_ID": self.session_id,
            "BETCODE_PERMISSION_TOOL": self.tool_name,
            "BETCODE_PERMISSION_DESCRIPTION": self.description,
            "BETCODE_PERMISSION_INPUT": self.input_json[:MAX_INPUT_CHARS],
            "BETCODE_PERMISSION_WAITING_SECONDS": str(self.waiting_seconds),
            "BETCODE_PERMISSION_EXPIRES_AT": str(self.expires_at),
            "BETCODE_PERMISSION_SUMMARY": self.summary(),
        }


class Notifier:
    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.command = tuple(command) if command else None
        self._environ = environ
        self.timeout = timeout
        self._running: set[asyncio.Task[None]] = set()

    def remind(self, notice: ReminderNotice, session: Session | None) -> None:
        """Tell the session's clients (if it is loaded), log it, and start the command."""
        log.warning("reminder: %s", notice.summary())
        if session is not None:
            event = translate.permission_reminder_event(
                notice.request_id,
                notice.tool_name,
                notice.waiting_seconds,
                expires_at=notice.expires_at,
            )
            session.emit([event])
        if self.command is not None:
            task = asyncio.create_task(self._run(self.command, notice), name="notify-command")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def close(self) -> None:
        """Wait for the commands still running (each is bounded by the timeout)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    async def _run(self, command: tuple[str, ...], notice: ReminderNotice) -> None:
        env = {**(os.environ if self._environ is None else self._environ), **notice.environment()}
        try:
            child = await spawn(command, stderr=PIPE, env=env)
        except OSError as error:
            log.error("notify command %s could not start: %s", command[0], error)
            return
        try:
            _, stderr = await asyncio.wait_for(child.communicate(), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # its own group: its children too
            await child.wait()
            child.close()
            log.error("notify command %s killed after %g s", command[0], self.timeout)
            return
        if child.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-STDERR_TAIL_CHARS:]
            log.error("notify command %s exited with %s: %s", command[0], child.returncode, tail)
