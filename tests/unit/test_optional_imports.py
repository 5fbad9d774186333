"""A daemon pays only for what is enabled: importing what `betcode daemon start` runs loads none
of the libraries of the optional capabilities (web client, metrics, tracing, relay server).
benchmarks/bench_idle_rss.py measures what that saves."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("aiohttp", "prometheus_client", "opentelemetry", "nats", "asyncpg", "pywebpush")


def test_the_daemon_imports_no_optional_library() -> None:
    probe = (
        "import json, sys\n"
        "import betcode.cli.main, betcode.cli.daemon_cmd, betcode.daemon\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    imported = set(json.loads(ran.stdout))
    assert imported.isdisjoint(OPTIONAL), sorted(imported & set(OPTIONAL))
