"""A scripted fake claude for fault tests, and the record of every start it made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from betcode.devtools.fake_claude import make_fake_claude


class FakeClaude:
    """Writes fake claude binaries under `root`; all of them log their starts to one file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "starts.jsonl"
        self.stdin_log = root / "stdin.jsonl"

    def binary(self, runs: list[dict[str, Any]], name: str = "fake") -> Path:
        """A `claude` whose n-th start plays runs[n] (the last one repeats)."""
        script = {"log": str(self.log), "stdin_log": str(self.stdin_log), "runs": runs}
        return make_fake_claude(self.root / name, script)

    def starts(self) -> list[list[str]]:
        """The argv of every start so far (`--version` probes are not starts)."""
        if not self.log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.log.read_text().splitlines()]

    def stdin_messages(self) -> list[dict[str, Any]]:
        """Every line any of its processes read on stdin, in order (one file for all)."""
        if not self.stdin_log.exists():
            return []
        return [json.loads(line) for line in self.stdin_log.read_bytes().splitlines() if line]


def resume_id(argv: list[str]) -> str | None:
    """The conversation a start resumed (`--resume ID`), None for a fresh one."""
    return argv[argv.index("--resume") + 1] if "--resume" in argv else None
