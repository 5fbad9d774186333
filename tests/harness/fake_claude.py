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

    def binary(self, runs: list[dict[str, Any]], name: str = "fake") -> Path:
        """A `claude` whose n-th start plays runs[n] (the last one repeats)."""
        return make_fake_claude(self.root / name, {"log": str(self.log), "runs": runs})

    def starts(self) -> list[list[str]]:
        """The argv of every start so far (`--version` probes are not starts)."""
        if not self.log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.log.read_text().splitlines()]


def resume_id(argv: list[str]) -> str | None:
    """The conversation a start resumed (`--resume ID`), None for a fresh one."""
    return argv[argv.index("--resume") + 1] if "--resume" in argv else None
