"""Finding the `claude` binary: --claude-bin, else BETCODE_CLAUDE_BIN, else `claude` on PATH,
else the project's pinned copy under tools/claude-code.

An explicitly named binary (flag or environment) that is unusable is an error, never a silent
fall-through: the user asked for that one.
"""

from __future__ import annotations

import enum
import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CLAUDE_BIN_ENV = "BETCODE_CLAUDE_BIN"

# src/betcode/claude/locate.py → the repository root holding tools/claude-code.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
_PINNED_PACKAGE_DIR = Path("tools/claude-code/node_modules/@anthropic-ai")


class BinarySource(enum.StrEnum):
    FLAG = "flag"
    ENV = "env"
    PATH = "path"
    PINNED = "pinned"


@dataclass(frozen=True)
class ClaudeBinary:
    path: Path
    source: BinarySource

    def describe(self) -> str:
        """One line for `betcode doctor` and startup logs."""
        origin = {
            BinarySource.FLAG: "--claude-bin",
            BinarySource.ENV: CLAUDE_BIN_ENV,
            BinarySource.PATH: "`claude` on PATH",
            BinarySource.PINNED: "the project's pinned copy",
        }[self.source]
        return f"{self.path} (from {origin})"


class ClaudeNotFound(Exception):
    """No usable claude binary; the message lists every place that was tried."""


def platform_package_name(system: str | None = None, machine: str | None = None) -> str:
    """The npm optional package that carries the native binary for this platform."""
    system = (system or platform.system()).lower()
    machine = (machine or platform.machine()).lower()
    os_name = {"linux": "linux", "darwin": "darwin", "windows": "win32"}.get(system, system)
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )
    musl = "-musl" if os_name == "linux" and _is_musl() else ""
    return f"claude-code-{os_name}-{arch}{musl}"


def _is_musl() -> bool:
    # glibc systems report "glibc" here; musl (Alpine) ships its loader as /lib/ld-musl-*.
    libc, _ = platform.libc_ver()
    return libc != "glibc" and any(Path("/lib").glob("ld-musl-*.so.1"))


def pinned_candidates(project_root: Path = PROJECT_ROOT) -> list[Path]:
    """The pinned CLI: the package's launcher first, then the platform package's binary."""
    base = project_root / _PINNED_PACKAGE_DIR
    exe = "claude.exe" if platform.system() == "Windows" else "claude"
    return [base / "claude-code" / "bin" / "claude.exe", base / platform_package_name() / exe]


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _explicit(path_text: str, source: BinarySource, what: str) -> ClaudeBinary:
    path = Path(path_text).expanduser()
    if not path.is_absolute():
        found = shutil.which(path_text)
        path = Path(found) if found else path.resolve()
    if not _usable(path):
        problem = "does not exist" if not path.exists() else "is not an executable file"
        raise ClaudeNotFound(
            f"the claude binary given by {what} ({path_text}) {problem}; "
            f"fix {what} or drop it to use `claude` on PATH or the pinned copy"
        )
    return ClaudeBinary(path, source)


def find_claude_binary(
    explicit: str | None,
    env: Mapping[str, str],
    *,
    project_root: Path = PROJECT_ROOT,
) -> ClaudeBinary:
    """Resolve the claude binary in the documented order (flag, env, PATH, pinned)."""
    if explicit:
        return _explicit(explicit, BinarySource.FLAG, "--claude-bin")
    from_env = env.get(CLAUDE_BIN_ENV, "")
    if from_env:
        return _explicit(from_env, BinarySource.ENV, CLAUDE_BIN_ENV)
    on_path = shutil.which("claude", path=env.get("PATH", ""))
    if on_path:
        return ClaudeBinary(Path(on_path), BinarySource.PATH)
    pinned = pinned_candidates(project_root)
    for candidate in pinned:
        if _usable(candidate):
            return ClaudeBinary(candidate, BinarySource.PINNED)
    tried = [
        "--claude-bin (not given)",
        f"{CLAUDE_BIN_ENV} (not set)",
        "`claude` on PATH (not found)",
        *(f"{path} (missing)" for path in pinned),
    ]
    raise ClaudeNotFound(
        "no claude binary found; tried: "
        + "; ".join(tried)
        + ". Install Claude Code, pass --claude-bin, or run scripts/setup for the pinned copy."
    )
