"""An isolated world for one real-CLI run: scratch HOME, temp dirs, a git repo as cwd.

Only what the CLI needs is passed (PATH for git/python/bash); nothing from the developer's
own ~/.claude, TMPDIR or API key leaks in, and nothing the CLI writes leaks out.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DUMMY_API_KEY = "dummy"


@dataclass(frozen=True)
class Workspace:
    """The scratch directories of one CLI run, all under one root."""

    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def runtime(self) -> Path:
        return self.root / "run"

    def env(self, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The CLI's complete environment, pointed at the mock API at `base_url`."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CLAUDE_CODE_TMPDIR": str(self.tmp),
            "TMPDIR": str(self.tmp),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": DUMMY_API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        }
        env.update(extra or {})
        return env


def make_workspace(root: Path) -> Workspace:
    """Create the scratch directories and a git repository (with one commit) as the cwd."""
    workspace = Workspace(root)
    for directory in (workspace.repo, workspace.home, workspace.tmp, workspace.runtime):
        directory.mkdir(parents=True, exist_ok=True)
    git = ["git", "-c", "user.name=BetCode Tests", "-c", "user.email=tests@betcode.invalid"]
    (workspace.repo / "README.md").write_text("scratch repository for a Claude Code test run\n")
    git_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workspace.home)}
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "README.md"],
        ["commit", "-q", "-m", "init"],
    ):
        subprocess.run(
            [*git, *args], cwd=workspace.repo, env=git_env, check=True, capture_output=True
        )
    workspace.runtime.chmod(0o700)
    return workspace
