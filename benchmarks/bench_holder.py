"""The cost of the holder (claude/holder): its memory, and what the extra hop costs per line.

    .venv/bin/python benchmarks/bench_holder.py [--lines N] [--sessions N] [--json]

In one run, the same fake-claude flood (N stdout lines at full speed, each stamped with the
monotonic time it was written) is read twice: by a direct child (`ClaudeProcess`, claude's
stdout is the daemon's pipe) and through a holder (`HeldClaude`: claude → holder → spool file
→ Unix socket → daemon, acknowledged per batch as a session's commit would). Figures:

* ingest_lines_per_s_direct / _holder: lines framed and handed to the consumer per second,
  from the first line to the last;
* line_latency_p50_ms / p99_ms, direct and holder: write by claude → handed to the consumer,
  for PACED_LINES lines at PACED_RATE lines/s (one write per line: no flood queueing);
* holder_rss_mb: the resident memory of one idle holder (mean over --sessions holders, each
  with its own idle fake claude), and holder_start_ms: spawn → claude running under it.

Printed, never asserted (benchmarks/README.md has the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from betcode.claude.holder.client import HeldClaude, HolderPlace, StdoutMark
from betcode.claude.process import ClaudeProcess
from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.framing import Line

PACED_LINES = 3000
PACED_RATE = 1000
USER_LINE = b'{"type":"user","message":{"role":"user","content":"go"}}\n'


class Collector:
    """Counts lines and their latency; acknowledges each batch at once (a commit would)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first_at = 0.0
        self.last_at = 0.0
        self.latencies_ns: list[int] = []
        self.done = asyncio.Event()

    def __call__(self, lines: list[Line], mark: StdoutMark | None = None) -> None:
        now_ns = time.monotonic_ns()
        if not self.count:
            self.first_at = now_ns / 1e9
        for line in lines:
            if b"fake_ts_ns" in line.data:
                stamp = msgspec.json.decode(line.data).get("fake_ts_ns")
                self.latencies_ns.append(now_ns - stamp)
                self.count += 1
        self.last_at = now_ns / 1e9
        if mark is not None:
            mark.acknowledge(mark.ends[-1])
        if self.count >= self.expected:
            self.done.set()


async def flood(binary: Path, root: Path, lines: int, held: bool) -> dict[str, float]:
    collector = Collector(lines)
    process: ClaudeProcess | HeldClaude
    if held:
        process = HeldClaude(collector, HolderPlace(root / "holders"), "bench")
    else:
        process = ClaudeProcess(collector)
    await process.start([str(binary), "-p"], root, dict(os.environ))
    await process.write(USER_LINE)
    await asyncio.wait_for(collector.done.wait(), 600)
    process.close_stdin()
    await process.terminate(5.0)
    latencies = sorted(collector.latencies_ns)
    elapsed = collector.last_at - collector.first_at
    return {
        "lines_per_s": collector.count / elapsed if elapsed > 0 else float("inf"),
        "p50_ms": latencies[len(latencies) // 2] / 1e6,
        "p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6,
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def idle_holders(binary: Path, root: Path, sessions: int) -> dict[str, float]:
    held: list[HeldClaude] = []
    starts = []
    for n in range(sessions):
        process = HeldClaude(lambda lines, mark: None, HolderPlace(root / "holders"), f"s{n}")
        began = time.perf_counter()
        await process.start([str(binary), "-p"], root, dict(os.environ))
        starts.append((time.perf_counter() - began) * 1000)
        held.append(process)
    await asyncio.sleep(0.5)  # past start-up
    rss = [rss_mb(process.holder_pid) for process in held]
    for process in held:
        await process.terminate(5.0)
    return {"holder_rss_mb": statistics.mean(rss), "holder_start_ms": statistics.median(starts)}


async def main(lines: int, sessions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bh-") as scratch:
        root = Path(scratch)
        flooding = make_fake_claude(
            root / "flood",
            {"turns": [[{"do": "flood", "lines": lines, "text": "x", "stamp": True}]]},
        )
        paced = make_fake_claude(
            root / "paced",
            {"turns": [[{"do": "flood", "lines": PACED_LINES, "rate": PACED_RATE, "stamp": True}]]},
        )
        idle = make_fake_claude(root / "idle", {"turns": [[{"do": "hang"}]]})
        direct = await flood(flooding, root, lines, held=False)
        holder = await flood(flooding, root, lines, held=True)
        direct_paced = await flood(paced, root, PACED_LINES, held=False)
        holder_paced = await flood(paced, root, PACED_LINES, held=True)
        memory = await idle_holders(idle, root, sessions)
    return {
        "lines": lines,
        "ingest_lines_per_s_direct": round(direct["lines_per_s"]),
        "ingest_lines_per_s_holder": round(holder["lines_per_s"]),
        "line_latency_p50_ms_direct": round(direct_paced["p50_ms"], 3),
        "line_latency_p50_ms_holder": round(holder_paced["p50_ms"], 3),
        "line_latency_p99_ms_direct": round(direct_paced["p99_ms"], 3),
        "line_latency_p99_ms_holder": round(holder_paced["p99_ms"], 3),
        **{key: round(value, 2) for key, value in memory.items()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    figures = asyncio.run(main(options.lines, options.sessions))
    if options.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:32} {value}")
