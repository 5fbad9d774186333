"""Subagents and orchestration (issue 14), through a real daemon process and real gRPC.

    .venv/bin/python benchmarks/bench_subagents.py [--json]

The daemon (`betcode daemon start --foreground`) runs fake claudes (`devtools/fake_claude`):
each subagent's claude answers its prompt with one short text, so the figures are BetCode's
own cost, plus the ~40 ms a fake claude takes to start.

* one subagent, spawn to its stored end (`SpawnSubagent`, then `WatchSubagent` to the end):
  the baseline a step costs on its own;
* a 50-step SEQUENTIAL plan (each step waits for the one before): wall time per step, and the
  scheduling overhead per step: from a step's StepCompleted to the next one's StepStarted
  (the daemon's own timestamps: the end stored, the next step's session and row created, its
  prompt prepended with the summary), median and worst;
* a 50-step DAG (10 layers of 5, each step depending on all 5 of the layer before): wall time;
* daemon RSS (its own process, without its children) idle, and its peak while 5 subagents run
  at once (their fake claudes sleep 3 s inside the turn); also the children's summed RSS.

Figures are printed, never asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import psutil

from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, agent_pb2_grpc, subagent_pb2, subagent_pb2_grpc

BASELINE_RUNS = 5
STEPS = 50
CONCURRENT = 5
FAST = {"turns": [[{"do": "text", "text": "step done"}]]}
SLOW = {"turns": [[{"do": "sleep", "seconds": 3}, {"do": "text", "text": "slow step done"}]]}
# Starts (in order) before the slow ones: the baseline, the sequential plan, the DAG.
FAST_STARTS = BASELINE_RUNS + 2 * STEPS


def start_daemon(root: Path) -> subprocess.Popen[bytes]:
    claude = make_fake_claude(root / "claude", {"runs": [FAST] * FAST_STARTS + [SLOW]})
    env = {
        **os.environ,
        "BETCODE_CLAUDE_BIN": str(claude),
        "BETCODE_SOCKET": str(root / "daemon.sock"),
        "BETCODE_DATA_DIR": str(root / "data"),
        "BETCODE_CONFIG_DIR": str(root / "config"),
        "BETCODE_LOG_LEVEL": "warn",
    }
    log = open(root / "daemon.log", "wb")  # noqa: SIM115 - the daemon writes it while it runs
    process = subprocess.Popen(
        [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not (root / "daemon.sock").exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"the daemon did not start: {(root / 'daemon.log').read_text()}")
        time.sleep(0.05)
    return process


async def parent_session(channel: grpc.aio.Channel, cwd: Path) -> str:
    call = agent_pb2_grpc.AgentServiceStub(channel).Converse()
    await call.write(
        agent_pb2.AgentRequest(start=agent_pb2.StartConversation(working_directory=str(cwd)))
    )
    async for event in call:
        if event.HasField("session_info"):
            call.cancel()
            return str(event.session_info.session_id)
    raise SystemExit("no session")


async def one_subagent(stub: subagent_pb2_grpc.SubagentServiceStub, parent: str) -> float:
    began = time.perf_counter()
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(parent_session_id=parent, prompt="go")
    )
    request = subagent_pb2.WatchSubagentRequest(subagent_id=spawned.subagent_id)
    async for _ in stub.WatchSubagent(request):
        pass
    return time.perf_counter() - began


async def plan(
    stub: subagent_pb2_grpc.SubagentServiceStub,
    parent: str,
    steps: list[subagent_pb2.OrchestrationStep],
    strategy: subagent_pb2.OrchestrationStrategy.ValueType,
) -> tuple[float, list[subagent_pb2.OrchestrationEvent]]:
    began = time.perf_counter()
    created = await stub.CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(
            parent_session_id=parent, steps=steps, strategy=strategy
        )
    )
    request = subagent_pb2.WatchOrchestrationRequest(orchestration_id=created.orchestration_id)
    events = [event async for event in stub.WatchOrchestration(request)]
    elapsed = time.perf_counter() - began
    if not events or not events[-1].HasField("completed"):
        raise SystemExit(f"the plan did not complete: {events[-1:]}")
    return elapsed, events


def handover_gaps_ms(events: list[subagent_pb2.OrchestrationEvent]) -> list[float]:
    """Per step of a chain: its StepCompleted to the next step's StepStarted."""
    done: dict[str, float] = {}
    started: dict[str, float] = {}
    for event in events:
        seconds = event.timestamp.seconds + event.timestamp.nanos / 1e9
        if event.HasField("step_completed"):
            done[event.step_completed.step_id] = seconds
        elif event.HasField("step_started"):
            started[event.step_started.step_id] = seconds
    return [(started[f"s{n + 1}"] - done[f"s{n}"]) * 1000 for n in range(STEPS - 1)]


def layered_dag() -> list[subagent_pb2.OrchestrationStep]:
    width = 5
    steps = []
    for n in range(STEPS):
        layer = n // width
        before = [f"s{m}" for m in range((layer - 1) * width, layer * width)] if layer else []
        steps.append(subagent_pb2.OrchestrationStep(id=f"s{n}", prompt="go", depends_on=before))
    return steps


def rss_mb(process: psutil.Process) -> float:
    return float(process.memory_info().rss) / 2**20


def children_rss_mb(process: psutil.Process) -> float:
    total = 0.0
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += rss_mb(child)
    return total


async def concurrent_rss(
    stub: subagent_pb2_grpc.SubagentServiceStub, parent: str, daemon: psutil.Process
) -> tuple[float, float]:
    spawned = [
        await stub.SpawnSubagent(
            subagent_pb2.SpawnSubagentRequest(parent_session_id=parent, prompt="go")
        )
        for _ in range(CONCURRENT)
    ]
    peak, children = 0.0, 0.0
    for _ in range(20):  # 2 s of samples while all five sleep inside their turn
        peak = max(peak, rss_mb(daemon))
        children = max(children, children_rss_mb(daemon))
        await asyncio.sleep(0.1)
    for s in spawned:
        async for _ in stub.WatchSubagent(
            subagent_pb2.WatchSubagentRequest(subagent_id=s.subagent_id)
        ):
            pass
    return peak, children


async def measure(root: Path, daemon: psutil.Process) -> dict[str, Any]:
    channel = grpc.aio.insecure_channel(f"unix:{root / 'daemon.sock'}")
    stub = subagent_pb2_grpc.SubagentServiceStub(channel)
    parent = await parent_session(channel, root)
    idle = rss_mb(daemon)
    baseline = [await one_subagent(stub, parent) for _ in range(BASELINE_RUNS)]
    chain = [subagent_pb2.OrchestrationStep(id=f"s{n}", prompt="go") for n in range(STEPS)]
    sequential, events = await plan(
        stub, parent, chain, subagent_pb2.ORCHESTRATION_STRATEGY_SEQUENTIAL
    )
    gaps = handover_gaps_ms(events)
    dag, _ = await plan(stub, parent, layered_dag(), subagent_pb2.ORCHESTRATION_STRATEGY_DAG)
    parent = await parent_session(channel, root)  # a fresh parent: its own subagent quota
    peak, children = await concurrent_rss(stub, parent, daemon)
    await channel.close()
    single_ms = statistics.median(baseline) * 1000
    per_step_ms = sequential * 1000 / STEPS
    return {
        "single_subagent_ms": round(single_ms, 1),
        "sequential_50_total_s": round(sequential, 2),
        "sequential_per_step_ms": round(per_step_ms, 1),
        "scheduling_overhead_median_ms": round(statistics.median(gaps), 1),
        "scheduling_overhead_max_ms": round(max(gaps), 1),
        "dag_50_total_s": round(dag, 2),
        "daemon_rss_idle_mb": round(idle, 1),
        "daemon_rss_5_concurrent_mb": round(peak, 1),
        "children_rss_5_concurrent_mb": round(children, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-subagents-") as scratch:
        root = Path(scratch)
        process = start_daemon(root)
        try:
            figures = asyncio.run(measure(root, psutil.Process(process.pid)))
        finally:
            process.terminate()
            process.wait(30)
    figures["machine"] = f"{platform.python_version()} on {os.cpu_count()} CPUs"
    for name, value in figures.items():
        print(f"{name:34} {value}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
