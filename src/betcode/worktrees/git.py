"""Running `git` without blocking the event loop (children start through betcode.spawn).

Git reads no repository-locating variables from the daemon's environment (GIT_DIR and its
kind would point every command at one repository), never prompts, and speaks English, so its
messages can be relayed as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode.spawn import PIPE, spawn
from betcode.worktrees.errors import Refusal, WorktreeError

GIT_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class GitResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANG="C")
    env.update(extra or {})
    return env


async def git(
    cwd: Path | str,
    *args: str,
    env: Mapping[str, str] | None = None,
    limit_seconds: float = GIT_TIMEOUT_SECONDS,
) -> GitResult:
    """Run `git -C cwd args...`; its result whatever the exit code."""
    child = await spawn(["git", "-C", str(cwd), *args], stdout=PIPE, stderr=PIPE, env=git_env(env))
    try:
        out, err = await asyncio.wait_for(child.communicate(), limit_seconds)
    except (TimeoutError, asyncio.CancelledError):
        kill_group(child.pid)
        child.close()
        raise
    return GitResult(await child.wait(), out.decode(errors="replace"), err.decode(errors="replace"))


async def git_ok(
    cwd: Path | str, *args: str, what: str, env: Mapping[str, str] | None = None
) -> str:
    """Run git; its stdout, or WorktreeError(GIT_FAILED) naming `what` with git's stderr."""
    result = await git(cwd, *args, env=env)
    if not result.ok:
        raise git_failure(what, result, args)
    return result.stdout


def git_failure(what: str, result: GitResult, args: Sequence[str]) -> WorktreeError:
    stderr = result.stderr.strip() or result.stdout.strip() or f"exit code {result.returncode}"
    return WorktreeError(
        Refusal.GIT_FAILED,
        f"{what}: {stderr}",
        {"git_stderr": stderr, "git_command": "git " + " ".join(args)},
    )


def kill_group(pid: int) -> None:
    """SIGKILL a child started by betcode.spawn together with everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
