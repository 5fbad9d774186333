"""CommandService latency in a git repository of 10,000 files (target: p99 of each call well
under a keystroke's 50 ms).

    .venv/bin/python benchmarks/bench_commands.py [--quick] [--json]

The repository: 10,000 tracked and untracked files in 500 folders two levels deep, a
`.gitignore` hiding a 2,000-file build folder, 30 project commands in `.claude/commands` (some
in sub-folders) and 10 of the user's. The daemon side is the real CommandService and catalog
served by grpc.aio on a Unix socket; claude's commands come from a stored-init stand-in listing
45 names (the real lookup is one indexed SQLite read). The client is a grpc.aio channel in the
same process, so each figure includes the client's own share of the round trip.

Figures: the first ListPath (index built by `git ls-files`), the same index built by the
walker (no git), one staleness check (a stat per folder, done at most once a second), and the
wall-clock p50/p99 of GetCommandRegistry and of ListPath over typed queries. Printed, never
asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from betcode.commands.catalog import CommandCatalog
from betcode.commands.current_directory import SessionDirectory
from betcode.commands.path_index import build_index, is_stale
from betcode.protocol.messages import SystemInit
from betcode.server.app import RpcService, method_handlers
from betcode.server.command_service import CommandService
from betcode.v1 import commands_pb2, commands_pb2_grpc

SESSION_ID = "bench-session"
FOLDERS, FILES_PER_FOLDER = 500, 20  # 10,000 listed files
TARGET_P99_MS = 50.0
QUERIES = [
    "",
    "pkg1",
    "pkg12/",
    "pkg123/mod4/",
    "pkg77/mod3/file_1",
    "file_19",
    "mod2",
    "xyz",
    "README",
]


def make_repository(root: Path) -> None:
    for folder in range(FOLDERS):
        directory = root / f"pkg{folder // 5}" / f"mod{folder % 5}"
        directory.mkdir(parents=True)
        for number in range(FILES_PER_FOLDER):
            (directory / f"file_{number}.py").write_text("x = 1\n")
    build = root / "build"
    build.mkdir()
    for number in range(2000):
        (build / f"artifact_{number}.o").write_text("o")
    (root / ".gitignore").write_text("build/\n")
    (root / "README.md").write_text("bench\n")
    commands = root / ".claude" / "commands"
    (commands / "team").mkdir(parents=True)
    for number in range(30):
        parent = commands / "team" if number % 3 == 0 else commands
        parent.joinpath(f"cmd{number}.md").write_text(
            f"---\ndescription: Command number {number}\nargument-hint: [x]\n---\nDo {number}.\n"
        )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], cwd=root, env=env, check=True)
    subprocess.run(
        [*git, "add", "pkg0", "pkg1", "pkg2", "README.md"], cwd=root, env=env, check=True
    )
    subprocess.run([*git, "commit", "-qm", "some tracked"], cwd=root, env=env, check=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def timed_calls(call: Callable[[int], Awaitable[None]], count: int) -> list[float]:
    timings: list[float] = []
    for number in range(count):
        started = time.perf_counter()
        await call(number)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


class OneSession:
    """The sessions' directories (SessionDirectories): the one session, working in `root`."""

    def __init__(self, root: Path) -> None:
        self._session = SessionDirectory(SESSION_ID, str(root))

    async def directory_of(self, session_id: str) -> str | None:
        return self._session.directory if session_id == SESSION_ID else None

    async def most_recent(self) -> SessionDirectory | None:
        return self._session

    async def working_in(self, directory: str) -> SessionDirectory | None:
        return self._session if directory == self._session.directory else None


async def measure(root: Path, home: Path, rounds: int) -> dict[str, float]:
    async def claude_init(session_id: str | None) -> SystemInit:
        return SystemInit(slash_commands=[f"builtin-{n}" for n in range(45)])

    service = CommandService(OneSession(root), CommandCatalog(home / ".claude", claude_init))
    described = RpcService(commands_pb2.DESCRIPTOR.services_by_name["CommandService"], service)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                described.descriptor.full_name, method_handlers(described)
            ),
        )
    )
    socket = root.parent / "bench.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    figures: dict[str, float] = {}
    try:
        async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
            stub = commands_pb2_grpc.CommandServiceStub(channel)

            async def list_path(number: int) -> None:
                query = QUERIES[number % len(QUERIES)]
                await stub.ListPath(
                    commands_pb2.ListPathRequest(session_id=SESSION_ID, query=query, max_results=50)
                )

            async def registry(number: int) -> None:
                await stub.GetCommandRegistry(
                    commands_pb2.GetCommandRegistryRequest(session_id=SESSION_ID)
                )

            first = await timed_calls(list_path, 1)
            figures["list_path_first_ms"] = first[0]
            await timed_calls(registry, 1)
            paths = await timed_calls(list_path, rounds)
            commands = await timed_calls(registry, rounds)
            answer = await stub.GetCommandRegistry(
                commands_pb2.GetCommandRegistryRequest(session_id=SESSION_ID)
            )
            figures["registry_entries"] = len(answer.commands)
    finally:
        await server.stop(0)
    figures["list_path_p50_ms"] = statistics.median(paths)
    figures["list_path_p99_ms"] = percentile(paths, 0.99)
    figures["registry_p50_ms"] = statistics.median(commands)
    figures["registry_p99_ms"] = percentile(commands, 0.99)
    return figures


def index_figures(root: Path) -> dict[str, float]:
    started = time.perf_counter()
    index = build_index(root)
    git_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    is_stale(index)
    stale_ms = (time.perf_counter() - started) * 1000
    plain = root.parent / "plain"
    shutil.copytree(root, plain, ignore=shutil.ignore_patterns(".git"))
    started = time.perf_counter()
    walked = build_index(plain)
    walk_ms = (time.perf_counter() - started) * 1000
    return {
        "indexed_paths": len(index.paths),
        "index_git_ms": git_ms,
        "index_walk_ms": walk_ms,
        "walk_indexed_paths": len(walked.paths),
        "stale_check_ms": stale_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    rounds = 300 if args.quick else 2000
    with tempfile.TemporaryDirectory(prefix="bc-bench-") as scratch:
        root = Path(scratch) / "repo"
        home = Path(scratch) / "home"
        (home / ".claude" / "commands").mkdir(parents=True)
        for number in range(10):
            (home / ".claude" / "commands" / f"mine{number}.md").write_text(f"Mine {number}\n")
        root.mkdir()
        make_repository(root)
        figures = index_figures(root)
        figures |= asyncio.run(measure(root, home, rounds))
    print(
        f"machine: {platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
        f"{rounds} calls of each"
    )
    for name, value in figures.items():
        print(f"{name:<22}{value:>12,.2f}")
    for name in ("list_path_p99_ms", "registry_p99_ms"):
        verdict = "meets" if figures[name] < TARGET_P99_MS else "misses"
        print(f"{name} {figures[name]:.2f} ms {verdict} the {TARGET_P99_MS:.0f} ms target")
    if args.json:
        print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
