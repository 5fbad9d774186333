"""Run the mock Messages API as a process: the first stdout line is its base URL."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from betcode.devtools.mock_anthropic.scenarios import SCENARIOS
from betcode.devtools.mock_anthropic.server import MockAnthropic


def _scenario_list() -> str:
    lines = []
    for name, scenario in sorted(SCENARIOS.items()):
        defaults = ", ".join(f"{k}={v!r}" for k, v in scenario.defaults.items())
        suffix = f" [{defaults}]" if defaults else ""
        lines.append(f"SCN:{name:<18} {scenario.description}{suffix}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m betcode.devtools.mock_anthropic",
        description="Offline mock of the Anthropic Messages API (loopback only).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument("--delta-delay", type=float, default=0.0, help="seconds after each delta")
    parser.add_argument("--default-scenario", default="plain", help="for text without SCN: token")
    parser.add_argument("--list", action="store_true", help="print the scenarios and exit")
    options = parser.parse_args(argv)
    if options.list:
        print(_scenario_list())
        return 0
    if options.default_scenario not in SCENARIOS:
        parser.error(f"unknown scenario {options.default_scenario!r}; see --list")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with MockAnthropic(
        options.host,
        options.port,
        delta_delay_s=options.delta_delay,
        default_scenario=options.default_scenario,
    ) as mock:
        print(mock.base_url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
