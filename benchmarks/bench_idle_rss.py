"""Resident memory of an idle daemon: nothing optional enabled, then each capability alone.

    .venv/bin/python benchmarks/bench_idle_rss.py [--runs N]

Each configuration starts a real `betcode daemon start --foreground` (the pinned claude, its own
temporary config, data and socket directories), waits until it serves on its socket, lets it
settle, reads VmRSS from /proc/<pid>/status, and stops it. No session is opened: this is what
a daemon costs before anyone uses it. The median of the runs is printed per configuration,
with the optional libraries the process imported (it runs with `-X importtime`), so a
capability that pulls its library in while off shows up.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from betcode.remote.pki import Authority, cert_pem
from betcode.tunnel.identity import MachineIdentity

ROOT = Path(__file__).resolve().parents[1]
CLAUDE_BIN = ROOT / "tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
SETTLE_SECONDS = 2.0
START_TIMEOUT_SECONDS = 60.0
# The optional libraries, by the capability that needs them.
OPTIONAL_LIBRARIES = ("aiohttp", "prometheus_client", "nats", "opentelemetry", "cryptography")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def configurations() -> dict[str, list[str]]:
    """Name → extra `daemon start` flags. The relay address answers nothing: the tunnel keeps
    retrying, which is the idle cost of a configured relay (its machine identity is made by
    `give_machine_identity`, signed by a CA of our own)."""
    return {
        "nothing optional": [],
        "web": ["--http", f"127.0.0.1:{free_port()}"],
        "metrics": ["--metrics", f"127.0.0.1:{free_port()}"],
        "tracing": ["--set", f"daemon.observability.otlp_endpoint=127.0.0.1:{free_port()}"],
        "relay": ["--relay", f"https://127.0.0.1:{free_port()}"],
    }


def serving(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(sock))
        except OSError:
            return False
        return True


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon): all resident pages, and those private to the process (the rest are
    shared library files, such as grpc's and libpython's, shared with other processes)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()[0] if value.split() else "0"
    return int(fields["VmRSS"]), int(fields["RssAnon"])


def loaded_libraries(import_log: str) -> list[str]:
    """Which optional libraries the daemon imported, from its `-X importtime` lines
    (`import time: self | cumulative | module`)."""
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in import_log.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return [name for name in OPTIONAL_LIBRARIES if name in imported]


def give_machine_identity(config_dir: Path) -> None:
    """What `betcode machine register` leaves in `<config dir>/certs`, signed locally."""
    authority = Authority.create()
    identity = MachineIdentity(config_dir / "certs")
    csr = identity.new_request("bench-machine")
    certificate = cert_pem(authority.machine_certificate(csr, "bench-machine")).decode()
    identity.store("bench-machine", "bench", certificate, cert_pem(authority.cert).decode())


def measure(flags: list[str]) -> tuple[tuple[int, int], list[str]]:
    with tempfile.TemporaryDirectory(prefix="bc-rss-", dir="/tmp") as scratch:
        root = Path(scratch)
        sock = root / "run" / "daemon.sock"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root / "home"),
            "BETCODE_CONFIG_DIR": str(root / "config"),
            "BETCODE_DATA_DIR": str(root / "data"),
            "BETCODE_SOCKET": str(sock),
            "BETCODE_CLAUDE_BIN": str(CLAUDE_BIN),
        }
        if "--relay" in flags:
            give_machine_identity(root / "config")
        argv = [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "betcode.cli.main",
            "daemon",
            "start",
            "--foreground",
        ]
        log = (root / "daemon.log").open("wb")
        daemon = subprocess.Popen(
            argv + flags, env=env, stdout=log, stderr=log, start_new_session=True
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not serving(sock):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    log.close()
                    tail = (root / "daemon.log").read_text()[-2000:]
                    raise RuntimeError(f"daemon {' '.join(flags)} did not start:\n{tail}")
                time.sleep(0.05)
            time.sleep(SETTLE_SECONDS)
            memory = memory_kib(daemon.pid)
            return memory, loaded_libraries((root / "daemon.log").read_text(errors="replace"))
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
            log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="configuration names to measure")
    args = parser.parse_args()
    print(f"idle daemon RSS, median of {args.runs} runs (MB = 1,000,000 bytes)")
    for name, flags in configurations().items():
        if args.only and name not in args.only:
            continue
        samples = [measure(flags) for _ in range(args.runs)]
        rss = statistics.median(rss for (rss, _), _ in samples) * 1024 / 1e6
        anon = statistics.median(anon for (_, anon), _ in samples) * 1024 / 1e6
        libraries = ", ".join(samples[-1][1]) or "none"
        print(f"  {name:18} {rss:6.1f} MB ({anon:5.1f} private)   optional libraries: {libraries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
