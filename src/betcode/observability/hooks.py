"""What the domain reports to observability, and the one place the daemon plugs it in.

The base `Observer` ignores every report, so code that reports never checks whether metrics or
tracing are on. Reports are facts, not library calls: a turn finished, a line was unparseable.
Any thread may report (the storage writer reports from its own); implementations must be
thread-safe for the `sqlite_*` reports.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

# A client's W3C `traceparent` (gRPC metadata) for the requests handled in this context: a turn
# started here continues the client's trace.
incoming_traceparent: ContextVar[str] = ContextVar("betcode_incoming_traceparent", default="")


@dataclass(frozen=True, slots=True)
class TurnReport:
    """One turn as it ended (claude's `result`)."""

    session_id: str
    duration_s: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cost_usd: float
    is_error: bool


class Observer:
    """Every report the domain makes. These do nothing: observability off.

    Reports without a session id belong to the session of the task making them (the logs'
    `session_id` context, observability/logs.py)."""

    def turn_started(self, session_id: str) -> None:
        """A user message was recorded: the session's turn begins."""

    def tool_call_started(self, session_id: str, tool_use_id: str, tool_name: str) -> None:
        """claude asked for a tool call (as its output shows it)."""

    def tool_call_finished(self, session_id: str, tool_use_id: str, is_error: bool) -> None:
        """A tool call's result came back (as claude's output shows it)."""

    def batch_stored(self, session_id: str, rows: int, store_s: float, deliver_s: float) -> None:
        """A batch of rows committed `store_s` after it was handed to the writer; its frames
        took `deliver_s` to reach the session's client queues."""

    def child_env(self) -> dict[str, str]:
        """Variables for a claude process started now (the trace context: TRACEPARENT)."""
        return {}

    def claude_spawned(self, outcome: str, duration_s: float) -> None:
        """A claude process was started (`outcome` "ok") or failed to start ("error")."""

    def claude_crashed(self, exit_code: int) -> None:
        """A claude process ended in a crash (a non-zero exit it was not asked for, or a kill
        by the watchdog); `exit_code` negative for a signal."""

    def lines_processed(self, count: int) -> None:
        """`count` stdout lines of claude were recorded."""

    def parse_error(self, error_type: str) -> None:
        """One stdout line could not be read as it should (invalid_json, invalid_utf8,
        not_object, truncated, tolerated)."""

    def permission_decided(self, decision: str, tool_name: str, waited_s: float) -> None:
        """A permission request was decided (`decision` one of the DecisionKind values) after
        waiting `waited_s` since claude asked (0 for a rule's decision)."""

    def turn_finished(self, turn: TurnReport) -> None:
        """A turn ended with claude's `result`."""

    def sqlite_operation(self, operation: str, duration_s: float) -> None:
        """The store writer finished a transaction (`operation` "append" or "call")."""

    def sqlite_error(self, error_type: str) -> None:
        """A store write failed (`error_type` the exception class name)."""


_observer = Observer()


def observer() -> Observer:
    """The observer in use (the do-nothing one unless the daemon installed another)."""
    return _observer


def install(new: Observer) -> Observer:
    """Use `new` from now on; returns the previous observer (to put back at shutdown)."""
    global _observer
    previous, _observer = _observer, new
    return previous


class ObserverGroup(Observer):
    """Passes every report to each of `members`, in order."""

    def __init__(self, members: list[Observer]) -> None:
        self.members = members

    def turn_started(self, session_id: str) -> None:
        for member in self.members:
            member.turn_started(session_id)

    def tool_call_started(self, session_id: str, tool_use_id: str, tool_name: str) -> None:
        for member in self.members:
            member.tool_call_started(session_id, tool_use_id, tool_name)

    def tool_call_finished(self, session_id: str, tool_use_id: str, is_error: bool) -> None:
        for member in self.members:
            member.tool_call_finished(session_id, tool_use_id, is_error)

    def batch_stored(self, session_id: str, rows: int, store_s: float, deliver_s: float) -> None:
        for member in self.members:
            member.batch_stored(session_id, rows, store_s, deliver_s)

    def child_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for member in self.members:
            env.update(member.child_env())
        return env

    def claude_spawned(self, outcome: str, duration_s: float) -> None:
        for member in self.members:
            member.claude_spawned(outcome, duration_s)

    def claude_crashed(self, exit_code: int) -> None:
        for member in self.members:
            member.claude_crashed(exit_code)

    def lines_processed(self, count: int) -> None:
        for member in self.members:
            member.lines_processed(count)

    def parse_error(self, error_type: str) -> None:
        for member in self.members:
            member.parse_error(error_type)

    def permission_decided(self, decision: str, tool_name: str, waited_s: float) -> None:
        for member in self.members:
            member.permission_decided(decision, tool_name, waited_s)

    def turn_finished(self, turn: TurnReport) -> None:
        for member in self.members:
            member.turn_finished(turn)

    def sqlite_operation(self, operation: str, duration_s: float) -> None:
        for member in self.members:
            member.sqlite_operation(operation, duration_s)

    def sqlite_error(self, error_type: str) -> None:
        for member in self.members:
            member.sqlite_error(error_type)
