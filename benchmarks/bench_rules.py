"""Permission rule evaluation speed with 200 rules (target: p99 < 0.2 ms per call).

    .venv/bin/python benchmarks/bench_rules.py [--quick] [--json]

The rule set mixes what real settings hold: Bash exact / prefix / glob rules in all three
lists, path rules anchored every way, WebFetch domains and MCP servers, plus a handful of
session grants. The calls cycle through simple and compound Bash commands (allowed, denied,
asked, undecided: the undecided ones try every rule), file reads and edits, fetches and MCP
tools. Each call is timed on its own, twice over: wall clock (perf_counter_ns) and this
thread's CPU time (thread_time_ns). On a shared machine the wall-clock tail is mostly time the
process spent preempted; the CPU-time figures show the cost of evaluation itself. Figures are
printed, never asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Mapping

from betcode.permissions.engine import RuleSet, evaluate
from betcode.permissions.grants import SessionGrant
from betcode.permissions.rules import Rule, RuleList, RuleSource, parse_rule

CWD = "/work/proj"
HOME = "/home/me"
TARGET_P99_MS = 0.2


def rule_texts() -> dict[RuleList, list[str]]:
    tools = ["npm", "git", "cargo", "make", "pytest", "docker", "kubectl", "go", "pip", "uv"]
    allow = [f"Bash({tool} test)" for tool in tools]
    allow += [f"Bash({tool} run:*)" for tool in tools]
    allow += [f"Bash({tool} build *)" for tool in tools]
    allow += [f"Bash({tool} * --help)" for tool in tools]
    allow += [f"Bash({tool} lint)" for tool in tools] + [f"Bash({tool} fmt:*)" for tool in tools]
    allow += [f"Bash(./scripts/task{i}.sh:*)" for i in range(9)]
    allow += [f"Read(/generated/{i}/**)" for i in range(10)]
    allow += [f"Read(src/module{i}/**)" for i in range(20)]
    allow += [f"Edit(src/module{i}/**/*.py)" for i in range(10)]
    allow += [f"WebFetch(domain:docs{i}.example.com)" for i in range(15)]
    allow += [f"mcp__server{i}" for i in range(10)] + ["Read(~/notes/**)", "Read(//opt/data/**)"]
    deny = [f"Bash({word}:*)" for word in ("rm", "sudo", "dd", "mkfs", "shutdown", "curl")]
    deny += [f"Bash({tool} push --force)" for tool in tools]
    deny += [f"Read(./secrets{i}/**)" for i in range(10)] + ["Read(.env)", "Read(//etc/**)"]
    deny += [f"WebFetch(domain:*.bad{i}.org)" for i in range(5)]
    ask = [f"Bash({tool} publish:*)" for tool in tools]
    ask += [f"Bash({tool} deploy *)" for tool in tools]
    ask += [f"Edit(/config/{i}/**)" for i in range(10)] + ["mcp__payments"]
    return {RuleList.ALLOW: allow, RuleList.DENY: deny, RuleList.ASK: ask}


def build_ruleset() -> RuleSet:
    rules: list[Rule] = []
    for list_name, texts in rule_texts().items():
        source = RuleSource(f"{CWD}/.claude/settings.json", list_name, CWD)
        rules.extend(parse_rule(text, source) for text in texts)
    assert len(rules) == 200, len(rules)
    return RuleSet(rules)


GRANTS = (
    SessionGrant("Bash", "ls -la"),
    SessionGrant("Bash", "python3 -m http.server:*"),
    SessionGrant("Edit", "./**"),
    SessionGrant("WebFetch", "domain:pypi.org"),
)

CALLS: dict[str, tuple[str, Mapping[str, object]]] = {
    "bash allowed": ("Bash", {"command": "uv run pytest -q tests"}),
    "bash compound allowed": ("Bash", {"command": "npm test && git build x 2>&1 | uv run tee"}),
    "bash denied": ("Bash", {"command": "git status && sudo rm -rf /tmp/x"}),
    "bash asked": ("Bash", {"command": "cargo publish --dry-run"}),
    "bash undecided": ("Bash", {"command": "python3 -c \"print('hello from bash')\""}),
    "bash long undecided": ("Bash", {"command": "echo " + "word " * 400}),
    "bash by grant": ("Bash", {"command": "ls -la && python3 -m http.server 8000"}),
    "read allowed": ("Read", {"file_path": f"{CWD}/src/module19/a/b/c.py"}),
    "read denied": ("Read", {"file_path": f"{CWD}/lib/deep/.env"}),
    "read undecided": ("Read", {"file_path": "/var/log/syslog"}),
    "edit by grant": ("Write", {"file_path": f"{CWD}/docs/x.md", "content": "x"}),
    "fetch allowed": ("WebFetch", {"url": "https://docs14.example.com/page"}),
    "fetch undecided": ("WebFetch", {"url": "https://unknown.example.net/"}),
    "mcp allowed": ("mcp__server9__query", {}),
}


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def measure(ruleset: RuleSet, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """Per call name: (wall-clock ms, CPU ms) of every evaluation."""
    timings: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in CALLS}
    for _ in range(rounds):
        for name, (tool, tool_input) in CALLS.items():
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            evaluate(ruleset, tool, tool_input, cwd=CWD, home=HOME, grants=GRANTS)
            cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
            timings[name][0].append(wall / 1e6)
            timings[name][1].append(cpu / 1e6)
    return timings


def summary(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    return statistics.median(values), percentile(values, 0.99), values[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    rounds = 300 if args.quick else 3000

    start = time.perf_counter()
    ruleset = build_ruleset()
    build_ms = (time.perf_counter() - start) * 1000
    measure(ruleset, 20)  # warm-up: regex caches, grant index
    timings = measure(ruleset, rounds)

    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"python {platform.python_version()} on {platform.system()}")  # fmt: skip
    print(f"200 rules parsed and indexed in {build_ms:.1f} ms; {rounds} rounds of each call")
    print(f"{'call':<22}{'wall p50':>10}{'wall p99':>10}{'cpu p50':>10}{'cpu p99':>10}  (ms)")
    for name, (wall, cpu) in timings.items():
        print(f"{name:<22}{summary(wall)[0]:>10.4f}{summary(wall)[1]:>10.4f}"
              f"{summary(cpu)[0]:>10.4f}{summary(cpu)[1]:>10.4f}")  # fmt: skip
    wall_all = summary([v for wall, _ in timings.values() for v in wall])
    cpu_all = summary([v for _, cpu in timings.values() for v in cpu])
    print(f"{'all calls':<22}{wall_all[0]:>10.4f}{wall_all[1]:>10.4f}"
          f"{cpu_all[0]:>10.4f}{cpu_all[1]:>10.4f}")  # fmt: skip
    for label, p99 in (("wall-clock", wall_all[1]), ("CPU-time", cpu_all[1])):
        verdict = "meets" if p99 < TARGET_P99_MS else "misses"
        print(f"{label} p99 {p99:.4f} ms {verdict} the {TARGET_P99_MS} ms target")
    if args.json:
        print(json.dumps({"rules": 200, "eval_p50_ms": wall_all[0], "eval_p99_ms": wall_all[1],
                          "eval_cpu_p50_ms": cpu_all[0], "eval_cpu_p99_ms": cpu_all[1],
                          "build_ms": build_ms}))  # fmt: skip


if __name__ == "__main__":
    main()
