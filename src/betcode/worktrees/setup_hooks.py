"""Setup hooks run in a new worktree.

Commands run one after another with cwd = the worktree, through `sh -c`, in an environment
built from nothing but PATH, HOME and the two WORKTREE_* variables, so no API key or other
secret of the daemon's reaches them. The whole setup shares one time limit; a command still
running then is killed with its process group. A failed or timed-out setup is reported; the
worktree stays (it is usable, the user may finish the setup by hand).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode.spawn import PIPE, spawn
from betcode.storage.worktrees import SetupStatus
from betcode.worktrees.git import kill_group

log = logging.getLogger(__name__)

SETUP_SCRIPT = Path(".betcode") / "worktree-setup.sh"
_INHERITED = ("PATH", "HOME")
_ERROR_TAIL_CHARS = 2000


@dataclass(frozen=True, slots=True)
class SetupOutcome:
    status: SetupStatus
    error: str | None = None


def setup_env(worktree: Path, branch: str, environ: Mapping[str, str]) -> dict[str, str]:
    env = {key: environ[key] for key in _INHERITED if key in environ}
    env.update(WORKTREE_PATH=str(worktree), WORKTREE_BRANCH=branch)
    return env


async def run_setup(
    commands: Sequence[str],
    worktree: Path,
    branch: str,
    limit_seconds: float,
    environ: Mapping[str, str] | None = None,
) -> SetupOutcome:
    if not commands:
        return SetupOutcome("none")
    env = setup_env(worktree, branch, os.environ if environ is None else environ)
    deadline = time.monotonic() + limit_seconds
    for command in commands:
        child = await spawn(["sh", "-c", command], stdout=PIPE, stderr=PIPE, cwd=worktree, env=env)
        try:
            out, err = await asyncio.wait_for(
                child.communicate(), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            kill_group(child.pid)
            child.close()
            await child.wait()
            message = (
                f"setup command {command!r} was still running after "
                f"daemon.worktree.setup_timeout_secs ({limit_seconds:g} s) and was killed"
            )
            log.warning("worktree %s: %s", worktree, message)
            return SetupOutcome("timeout", message)
        returncode = await child.wait()
        if returncode != 0:
            output = (err or out).decode(errors="replace").strip()[-_ERROR_TAIL_CHARS:]
            message = f"{command} exited with code {returncode}" + (f": {output}" if output else "")
            log.warning("worktree %s: setup failed: %s", worktree, message)
            return SetupOutcome("failed", message)
    return SetupOutcome("succeeded")


def setup_commands(
    worktree: Path, requested: str, repo_script: str | None, configured: Sequence[str]
) -> list[str]:
    """The first source that has something: the request's script, the repository's, the
    checked-out `.betcode/worktree-setup.sh`, then `daemon.worktree.setup_commands`."""
    if requested:
        return [requested]
    if repo_script:
        return [repo_script]
    if (worktree / SETUP_SCRIPT).is_file():
        return [f"sh {SETUP_SCRIPT}"]
    return list(configured)
