"""Which turn of a session is running, and what ends it.

A turn starts when a user message is recorded and normally ends at claude's `result`. It can
also end without one: claude exits (any exit code), or the message never reaches claude. Such
an ending must not end a LATER turn, so turns are numbered by their message and each ending
names the turn it knew of. A message still being delivered when claude restarts belongs to the
new process: its turn runs again. Pure bookkeeping, no I/O: the session turns the answers into
events.
"""

from __future__ import annotations

from dataclasses import dataclass

from betcode.protocol.messages import Result


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """How a turn ended, for whoever waits on the session (a subagent's runner): claude's
    `result` (ok unless it is an error), or an ending without one (claude exited, the message
    never reached it)."""

    ok: bool
    text: str
    exit_code: int = 0

    @classmethod
    def of_result(cls, result: Result) -> TurnEnd:
        ok = result.subtype == "success" and not result.is_error
        text = result.result if result.result is not None else "; ".join(result.errors)
        return cls(ok, text or result.subtype, 0 if ok else 1)


class Turns:
    def __init__(self) -> None:
        self.current = 0  # the number of the last turn started (its user message)
        self._ended = 0  # every turn up to this number is over
        self.delivering = 0  # user lines recorded but not yet taken by a claude process

    @property
    def active(self) -> bool:
        return self._ended < self.current

    def start(self) -> int:
        """A user message was recorded: its turn's number."""
        self.current += 1
        return self.current

    def finish(self) -> None:
        """claude's `result`: the running turn is over."""
        self._ended = self.current

    def undelivered(self, turn: int) -> bool:
        """The message of `turn` never reached claude; True when that ended the running turn
        (False when a later message took over, or it had ended already)."""
        if turn != self.current or not self.active:
            return False
        self._ended = turn
        return True

    def exited(self, turn_at_exit: int) -> bool:
        """claude exited when `turn_at_exit` was the last turn started; True when a turn was
        running on it (now ended). A later turn (its message waits for the next process)
        stays active."""
        if self._ended >= turn_at_exit:
            return False
        self._ended = turn_at_exit
        return True

    def runs_again(self, message_waiting: bool) -> None:
        """A new claude process runs; a message waiting for it makes the last turn active."""
        if message_waiting and not self.active:
            self._ended = self.current - 1
