"""The daemon under benchmark, in its own process: run_daemon() as `betcode daemon start
--foreground` runs it (on the same event loop: uvloop unless BETCODE_EVENT_LOOP=asyncio), with
idle reaping off so no claude is reaped mid-run.

    .venv/bin/python benchmarks/bench_daemon.py SOCKET DATA_DIR CONFIG_DIR CLAUDE_BIN

Runs until SIGTERM/SIGINT; logs warnings and errors to stderr. With BENCH_OTLP_ENDPOINT set,
observability is on: the metrics endpoint on a free loopback port and traces to that OTLP/HTTP
endpoint (the driver's sink). BENCH_GRPC_SERVER sets `daemon.grpc.server`.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from betcode import event_loop
from betcode.claude.backoff import SupervisorPolicy
from betcode.config.settings import DaemonSettings, GrpcSettings, ObservabilitySettings
from betcode.daemon import DaemonConfig, run_daemon


def main(socket: str, data_dir: str, config_dir: str, claude_bin: str) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    config = DaemonConfig(
        data_dir=Path(data_dir),
        socket_path=Path(socket),
        claude_bin=claude_bin,
        config_dir=Path(config_dir),
        environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": config_dir},
        policy=SupervisorPolicy(idle_reap_seconds=None, watchdog_seconds=600.0),
        settings=DaemonSettings(
            observability=observability(os.environ.get("BENCH_OTLP_ENDPOINT")),
            grpc=GrpcSettings(server=os.environ.get("BENCH_GRPC_SERVER", "betcode")),
        ),
    )
    return event_loop.run(run_daemon(config), event_loop.chosen_event_loop())


def observability(otlp_endpoint: str | None) -> ObservabilitySettings:
    if not otlp_endpoint:
        return ObservabilitySettings()
    return ObservabilitySettings(metrics_listen="127.0.0.1:0", otlp_endpoint=otlp_endpoint)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
