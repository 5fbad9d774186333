"""Driving the real CLI through BetCode's own codec.

stdout bytes → `LineFramer` → `ProtocolReader.decode_line` → canonical messages; stdin gets
the bytes the codec's writer makes. Every stdout line is also kept verbatim (`lines`), which is
what a contract transcript records.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from betcode.protocol.framing import LineFramer
from betcode.protocol.messages import (
    AssistantMessage,
    CanUseTool,
    ControlRequest,
    Message,
    Result,
    TextBlock,
    ToolResultBlock,
    UserMessage,
)
from betcode.protocol.reader import ProtocolReader
from harness.claude_process import ClaudeProcess

DEFAULT_TIMEOUT_S = 30.0
M = TypeVar("M")


class ClaudeStreamError(AssertionError):
    """The CLI ended its output, or went quiet, before what a test waited for; says what it saw."""


@dataclass
class Turn:
    """The messages of one turn, up to and including its `result`."""

    messages: list[Message] = field(default_factory=list)

    @property
    def result(self) -> Result:
        last = self.messages[-1] if self.messages else None
        if not isinstance(last, Result):
            raise ClaudeStreamError(f"the turn has no result; it ended with {last!r:.300}")
        return last

    def of_type(self, kind: type[M]) -> list[M]:
        return [m for m in self.messages if isinstance(m, kind)]

    @property
    def permission_requests(self) -> list[ControlRequest]:
        return [m for m in self.of_type(ControlRequest) if isinstance(m.request, CanUseTool)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [
            b
            for m in self.of_type(UserMessage)
            for b in m.content
            if isinstance(b, ToolResultBlock)
        ]

    @property
    def assistant_text(self) -> str:
        return "".join(
            b.text
            for m in self.of_type(AssistantMessage)
            for b in m.content
            if isinstance(b, TextBlock)
        )


Answer = Callable[[ControlRequest], bytes | None]
# The `start_claude` fixture: `await start_claude(extra_args=(...), env={...})`.
StartClaude = Callable[..., Awaitable["ClaudeSession"]]


class ClaudeSession:
    """One real CLI process, read and written through the codec."""

    def __init__(self, process: ClaudeProcess, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.process = process
        self.timeout_s = timeout_s
        self.framer = LineFramer()
        self.reader = ProtocolReader()
        self.lines: list[bytes] = []
        self.messages: list[Message] = []
        self._ready: deque[Message] = deque()
        self._eof = False

    async def send(self, line: bytes) -> None:
        """Write one line made by the codec's writer (it ends with a newline)."""
        await self.process.write(line)

    async def next_message(self, timeout_s: float | None = None) -> Message:
        """The next decoded stdout message; ClaudeStreamError at EOF or after the timeout."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while not self._ready:
            if self._eof:
                raise self._error("the CLI closed its stdout")
            remaining = deadline - time.monotonic()
            try:
                chunk = await asyncio.wait_for(self.process.read_chunk(), max(remaining, 0))
            except TimeoutError:
                raise self._error("no message within the timeout") from None
            lines = self.framer.feed(chunk) if chunk else self.framer.finish()
            self._eof = not chunk
            for line in lines:
                self.lines.append(line.data)
                message = self.reader.decode_line(line)
                if message is not None:
                    self._ready.append(message)
        message = self._ready.popleft()
        self.messages.append(message)
        return message

    async def turn(self, answer: Answer | None = None, timeout_s: float | None = None) -> Turn:
        """Read up to the next `result`; each control request is passed to `answer`, whose
        bytes (if any) are written back at once."""
        turn = Turn()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            message = await self.next_message(deadline - time.monotonic())
            turn.messages.append(message)
            if isinstance(message, ControlRequest) and answer is not None:
                reply = answer(message)
                if reply is not None:
                    await self.send(reply)
            if isinstance(message, Result):
                return turn

    async def finish(self, timeout_s: float | None = None) -> int:
        """Close stdin, read whatever the CLI still prints until EOF, and return its exit code."""
        self.process.close_stdin()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while not self._eof or self._ready:
            try:
                await self.next_message(deadline - time.monotonic())
            except ClaudeStreamError:
                if not self._eof:
                    raise
        async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
            return await self.process.wait()

    def _error(self, what: str) -> ClaudeStreamError:
        tail = b"\n".join(line[:300] for line in self.lines[-5:]).decode(errors="replace")
        stderr = self.process.stderr_text or "(empty)"
        return ClaudeStreamError(
            f"{what} (pid {self.process.pid}, exit code {self.process.process.returncode}).\n"
            f"last stdout lines:\n{tail or '(none)'}\nstderr:\n{stderr}"
        )
