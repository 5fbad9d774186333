"""What the relay and web benchmarks share: p50/p99 of a list of samples, and their command
line (`--quick` for fewer samples, `--json` for machine-readable figures)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Callable, Coroutine
from typing import Any


def percentiles(samples: list[float], digits: int = 2) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), digits),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], digits),
        "n": len(ordered),
    }


def run_and_print(
    description: str, main: Callable[[bool], Coroutine[Any, Any, dict[str, Any]]]
) -> None:
    """Parse the shared options, run `main(quick)`, print its figures (never asserted)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(main(args.quick))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    width = max(map(len, figures), default=0)
    for name, figure in figures.items():
        p50, p99, n = figure["p50"], figure["p99"], figure["n"]
        print(f"{name:{width}} p50 {p50:8.2f}  p99 {p99:8.2f}  (n={n})")
