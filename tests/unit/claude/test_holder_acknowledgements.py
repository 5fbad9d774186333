"""What the daemon tells a holder of its commits (claude/holder/client.py), seen from the holder's
end of the socket: the committed offset once it advanced by a step of the spool bound, and
claude's whole output once claude exited and its last line is committed."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from harness.conditions import until

from betcode.claude.holder.client import (
    ACK_STEPS_PER_SPOOL,
    HeldClaude,
    HolderLink,
    HolderPlace,
    StdoutMark,
)
from betcode.protocol.framing import Line

LINE = b'{"type":"stream_event","text":"0123456789"}\n'  # 44 bytes
STEP = 100  # the spool bound below is sixteen of these


class Holder:
    """The holder's end of the link: sends frames, collects the daemon's requests."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = b""
        self.sent = 0

    async def out(self, data: bytes) -> None:
        await self._send(f"OUT {self.sent} {len(data)}\n".encode() + data)
        self.sent += len(data)

    async def exit(self, end: int) -> None:
        await self._send(f"EXIT 0 {end}\n".encode())

    async def _send(self, frame: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, frame)

    async def requests(self) -> list[str]:
        await asyncio.sleep(0.05)  # whatever the daemon wrote is in the socket by now
        try:
            while chunk := self.sock.recv(65536):
                self.received += chunk
        except BlockingIOError:
            pass
        return self.received.decode().splitlines()


async def held_claude(tmp_path: Path) -> tuple[HeldClaude, Holder, list[StdoutMark]]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    marks: list[StdoutMark] = []

    def on_lines(lines: list[Line], mark: StdoutMark) -> None:
        marks.append(mark)

    # The steps follow the holder's own bound, from its HELLO: the daemon's setting (here the
    # default, far larger) may have changed since the holder started.
    process = HeldClaude(on_lines, HolderPlace(tmp_path / "holders"), "s1")
    gone = await asyncio.create_subprocess_exec("true")  # a claude pid nobody has any more
    await gone.wait()
    limit = STEP * ACK_STEPS_PER_SPOOL
    process.adopt(HolderLink("h1", 1, gone.pid, False, limit, reader, writer), 0)
    return process, Holder(theirs), marks


async def test_the_holder_hears_of_commits_once_they_advanced_by_a_step(tmp_path: Path) -> None:
    process, holder, marks = await held_claude(tmp_path)
    for _ in range(5):
        await holder.out(LINE)
        await until(lambda: bool(marks) and marks[-1].ends[-1] == holder.sent)
        marks[-1].acknowledge(marks[-1].ends[-1])
    # Committed: 44, 88 (not told), 132 (told), 176, 220 (not told: 88 past 132).
    assert await holder.requests() == ["ATTACH 0", "ACK 132"]
    process.detach()


async def test_the_holder_hears_of_the_whole_output_once_claude_exited(tmp_path: Path) -> None:
    process, holder, marks = await held_claude(tmp_path)
    await holder.out(LINE)
    await holder.out(b"\n\n")  # blank lines after the last one: stored as nothing
    await holder.exit(len(LINE) + 2)
    await until(lambda: process.returncode is not None)
    assert len(marks) == 1
    assert await holder.requests() == ["ATTACH 0"]  # the line is not committed yet
    marks[0].acknowledge(marks[0].ends[-1])
    assert await holder.requests() == ["ATTACH 0", f"ACK {len(LINE) + 2}"]
    assert await process.wait() == 0
