"""How a session answers what its claude supervisor reports: a process state (RESTARTING,
CRASHED, RUNNING again), an exit, and a conversation claude could not resume.

A report is not acted on when it is made: it is queued behind the stdout lines claude printed
before it (the session's consumer runs the queue in order), so an exit is judged only after a
`result` already queued has ended its turn. What a report depends on at the moment it is made
— whether a user line waits for the process, which turn was started last — is read then and
travels with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from betcode.claude.process import describe_returncode
from betcode.claude.supervisor import SupervisorState
from betcode.sessions import translate
from betcode.sessions.turns import Turns
from betcode.storage.sessions import SessionStatus
from betcode.v1 import common_pb2

Status = common_pb2.AgentStatus

CRASHED_HINT = "send a message to try again"
CONVERSATION_LOST = "CONVERSATION_LOST"
DAEMON_STOPPED = "DAEMON_STOPPED"
STOPPED_WAITING = (
    "the daemon stopped, and stopped claude during the turn; the permission request stays "
    "pending: answered once the daemon is back, a resumed claude is told the answer"
)
STOPPED_WORKING = (
    "the daemon stopped, and stopped claude during the turn; once the daemon is back, send a "
    "message to continue"
)


class SupervisorReports:
    """Turns supervisor reports into the session's events, turn endings and stored status."""

    def __init__(
        self,
        *,
        turns: Turns,
        translator: translate.Translator,
        emit: Callable[[Sequence[translate.AgentEvent]], object],
        set_status: Callable[[SessionStatus], None],
        enqueue: Callable[[Callable[[], None]], None],
        turn_cut: Callable[[str, int], None] = lambda message, code: None,
    ) -> None:
        self._turns = turns
        self._translator = translator
        self._emit = emit
        self._set_status = set_status
        self._enqueue = enqueue  # behind the stdout lines already queued
        self._turn_cut = turn_cut  # a turn ended without its `result` (message, exit code)
        # Set when the daemon stops (not keeping sessions): whether claude waited on an answer.
        self._daemon_stopping: bool | None = None

    def daemon_stops(self, *, request_open: bool) -> None:
        """The daemon is about to stop claude on purpose: its exit is no crash. Whether a
        permission request was open is read now, while claude is still the one that asked."""
        self._daemon_stopping = request_open

    def on_state(self, state: SupervisorState, detail: str) -> None:
        # Whether a user line waits for this process is read now: by the time the report is
        # handled, the line may already have been written.
        waiting = self._turns.delivering > 0
        self._enqueue(partial(self._state_changed, state, detail, waiting))

    def on_exit(self, returncode: int, stderr_tail: list[str]) -> None:
        self._enqueue(
            partial(
                self._exited, returncode, stderr_tail, self._turns.current, self._daemon_stopping
            )
        )

    def on_conversation_lost(self, claude_session_id: str) -> None:
        self._enqueue(partial(self._conversation_lost, claude_session_id))

    def _state_changed(self, state: SupervisorState, detail: str, waiting: bool) -> None:
        if state is SupervisorState.RESTARTING:
            # Every restart is news, even right after another one: not deduplicated.
            self._translator.set_status(Status.AGENT_STATUS_RESTARTING, detail)
            self._emit([translate.status_event(Status.AGENT_STATUS_RESTARTING, detail)])
        elif state is SupervisorState.CRASHED:
            message = f"{detail}; {CRASHED_HINT}"
            self._translator.set_status(Status.AGENT_STATUS_CRASHED, message)
            self._emit(
                [
                    translate.error_event("SUBPROCESS_CRASHED", message, is_fatal=False),
                    translate.status_event(Status.AGENT_STATUS_CRASHED, message),
                ]
            )
            self._set_status("error")
        elif state is SupervisorState.RUNNING:
            restarted = self._translator.status == Status.AGENT_STATUS_RESTARTING
            self._translator.process_restarted()
            if restarted:
                self._running_again(waiting)

    def _running_again(self, waiting: bool) -> None:
        """claude runs again after a crash: a message waiting for it is this process's turn;
        otherwise the session is idle (the turn the crash cut off was ended at the exit)."""
        self._turns.runs_again(waiting)
        status = Status.AGENT_STATUS_THINKING if self._turns.active else Status.AGENT_STATUS_IDLE
        self._emit(self._translator.set_status(status, "claude is running again"))

    def _exited(
        self, returncode: int, stderr_tail: list[str], turn: int, daemon_stopping: bool | None
    ) -> None:
        """claude exited (any code): a turn it was running will never see its `result`, so
        it ends here — unless a message recorded after the exit already began the next one.
        `daemon_stopping`: the daemon stopped it on purpose (whether a request was open)."""
        if not self._turns.exited(turn):  # no turn was running on it
            if returncode == 0:
                self._set_status("idle")
            return
        if daemon_stopping is not None:
            code, message = DAEMON_STOPPED, STOPPED_WAITING if daemon_stopping else STOPPED_WORKING
        else:
            how = (
                f"exited with code {returncode}"
                if returncode >= 0
                else "was " + describe_returncode(returncode)
            )
            code, message = "SUBPROCESS_CRASHED", f"claude {how} during the turn"
            if stderr_tail:
                message += f": {stderr_tail[-1]}"
        events = [translate.error_event(code, message)]
        if not self._turns.active:
            self._set_status("idle")
            events += self._translator.set_status(Status.AGENT_STATUS_IDLE, message)
        self._emit(events)
        self._turn_cut(message, returncode)

    def _conversation_lost(self, claude_session_id: str) -> None:
        """claude starts a new conversation: what it knew of this one is gone (this session's
        event log keeps everything)."""
        message = (
            f"claude could not resume its conversation {claude_session_id}: claude had not "
            "saved it (it was stopped first). claude starts a new conversation and has none of "
            "the earlier context; this session's history still has all of it"
        )
        self._emit([translate.error_event(CONVERSATION_LOST, message, is_fatal=False)])
