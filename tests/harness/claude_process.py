"""The real CLI as an asyncio child process, in its own process group, always killed at the end.

Byte level only: what the lines mean is the codec's business (see `session`).

The CLI 2.1.330 starts every Bash command in a NEW session (its own process group), so
killing the CLI's group alone would orphan a running tool: `kill` also kills the groups of
all the CLI's descendants.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psutil

# docs/PROTOCOL.md#starting-claude: the invocation that gives can_use_tool requests and stream
# events.
STREAM_JSON_ARGS = (
    "-p",
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--include-partial-messages",
)
READ_CHUNK = 64 * 1024


class ClaudeProcess:
    """One running CLI. Use `async with await ClaudeProcess.start(...)` or call `kill()`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._stderr = bytearray()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def start(
        cls, binary: Path, cwd: Path, env: Mapping[str, str], extra_args: Sequence[str] = ()
    ) -> ClaudeProcess:
        process = await asyncio.create_subprocess_exec(
            str(binary),
            *STREAM_JSON_ARGS,
            *extra_args,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: teardown reaches tool children
        )
        return cls(process)

    async def __aenter__(self) -> ClaudeProcess:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.kill()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")

    def _process_groups(self) -> set[int]:
        """The CLI's group and its descendants' groups, the CLI's group frozen meanwhile so
        that it starts nothing new."""
        groups = {self.pid}
        if self.process.returncode is not None:
            return groups
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGSTOP)
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(ProcessLookupError):
                    groups.add(os.getpgid(child.pid))
        groups.discard(os.getpgid(0))  # never the test runner's own group
        return groups

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(READ_CHUNK):
            self._stderr.extend(chunk)

    async def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        if not self.process.stdin.is_closing():
            self.process.stdin.close()

    async def read_chunk(self) -> bytes:
        """The next bytes from stdout (b"" at EOF)."""
        assert self.process.stdout is not None
        return await self.process.stdout.read(READ_CHUNK)

    async def wait(self) -> int:
        """The exit code, once the CLI has exited (bound it with `asyncio.timeout`)."""
        return await self.process.wait()

    async def kill(self) -> None:
        """SIGKILL the CLI's process group and those of its descendants (tools), then reap."""
        for pgid in self._process_groups():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self.close_stdin()
        await self.process.wait()
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._stderr_task
