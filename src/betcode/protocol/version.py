"""Which Claude Code CLI is installed, and how far BetCode trusts it (docs/PROTOCOL.md#versions).

`claude --version` prints "2.1.330 (Claude Code)" today; older CLIs printed
"claude v1.0.22 (anthropic-2024-12-01)". Both parse. The compatibility matrix maps a version to a
level with the same numbers as betcode.v1 `CompatibilityLevel`:

| version | level |
|---|---|
| unknown / unparseable | UNKNOWN |
| older than `minimum` (2.0.0: 1.x speaks the seed's older protocol) | INCOMPATIBLE → exit 78 |
| `minimum` ≤ v < `tested_min` (2.0.x) | DEGRADED: older than anything tested |
| `tested_min` ≤ v ≤ `tested_max` (2.1.0–2.1.330) | FULLY_COMPATIBLE |
| newer than `tested_max` | LIKELY_COMPATIBLE (warn, keep going) |
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

from betcode.spawn import PIPE, spawn

EXIT_CLAUDE_MISSING = 72  # sysexits EX_OSFILE: the claude binary cannot be found or run
EXIT_CLAUDE_TOO_OLD = 78  # EX_CONFIG: the installed claude is below the supported minimum

_VERSION = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)\.(\d+)(?:[-+][\w.-]*)?(?:\s*\(([^()]*)\))?")
_PRODUCT_NAMES = frozenset({"claude code", "claude"})


@dataclass(frozen=True, slots=True, order=True)
class ClaudeVersion:
    major: int
    minor: int
    patch: int
    api_version: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_claude_version(text: str) -> ClaudeVersion | None:
    """Find the first X.Y.Z in `claude --version` output; None when there is none.

    A parenthesised suffix other than the product name is kept as the API version.
    """
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch, suffix = match.groups()
    api_version = None
    if suffix is not None and suffix.strip() and suffix.strip().lower() not in _PRODUCT_NAMES:
        api_version = suffix.strip()
    return ClaudeVersion(int(major), int(minor), int(patch), api_version)


class CompatibilityLevel(enum.IntEnum):
    """Same numbers as `CompatibilityLevel` in proto/betcode/v1/version.proto."""

    UNKNOWN = 0
    FULLY_COMPATIBLE = 1
    LIKELY_COMPATIBLE = 2
    DEGRADED = 3
    INCOMPATIBLE = 4


@dataclass(frozen=True, slots=True)
class CompatibilityMatrix:
    minimum: ClaudeVersion = ClaudeVersion(2, 0, 0)
    tested_min: ClaudeVersion = ClaudeVersion(2, 1, 0)
    tested_max: ClaudeVersion = ClaudeVersion(2, 1, 330)

    def classify(self, version: ClaudeVersion | None) -> CompatibilityLevel:
        if version is None:
            return CompatibilityLevel.UNKNOWN
        if version < self.minimum:
            return CompatibilityLevel.INCOMPATIBLE
        if version < self.tested_min:
            return CompatibilityLevel.DEGRADED
        if version <= self.tested_max:
            return CompatibilityLevel.FULLY_COMPATIBLE
        return CompatibilityLevel.LIKELY_COMPATIBLE

    def explain(self, version: ClaudeVersion) -> str:
        """One sentence a user can act on, for logs and `betcode doctor`."""
        level = self.classify(version)
        tested = f"{self.tested_min}–{self.tested_max}"
        if level is CompatibilityLevel.INCOMPATIBLE:
            return (
                f"Claude Code {version} is older than the minimum supported {self.minimum}; "
                f"install {self.tested_max} (scripts/setup pins it)"
            )
        if level is CompatibilityLevel.DEGRADED:
            return (
                f"Claude Code {version} is older than the tested range {tested}; "
                "some features may be missing"
            )
        if level is CompatibilityLevel.FULLY_COMPATIBLE:
            return f"Claude Code {version} is within the tested range {tested}"
        return (
            f"Claude Code {version} is newer than the tested range {tested}; it will probably work"
        )


DEFAULT_MATRIX = CompatibilityMatrix()


class ProbeStatus(enum.StrEnum):
    FOUND = "found"  # printed a version
    MISSING = "missing"  # no such file, or not executable
    UNPARSEABLE = "unparseable"  # ran fine but printed no X.Y.Z
    FAILED = "failed"  # exited non-zero
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class VersionProbe:
    """What `<binary> --version` said, and what it means for BetCode."""

    binary: str
    status: ProbeStatus
    version: ClaudeVersion | None
    level: CompatibilityLevel
    message: str
    output: str = ""

    @property
    def exit_code(self) -> int | None:
        """The daemon's exit code for this outcome, or None when it may start."""
        if self.status is ProbeStatus.MISSING:
            return EXIT_CLAUDE_MISSING
        if self.level is CompatibilityLevel.INCOMPATIBLE:
            return EXIT_CLAUDE_TOO_OLD
        return None


async def probe_claude_version(
    binary: str,
    timeout: float = 10.0,  # noqa: ASYNC109 - the probe owns its deadline (and kills on expiry)
    env: Mapping[str, str] | None = None,
) -> VersionProbe:
    """Run `<binary> --version` (a real subprocess in its own process group) and classify it.

    `env` replaces the child's environment when given; by default it inherits ours.
    """
    ran = await _run_version_command(binary, timeout, env)
    if isinstance(ran, VersionProbe):
        return ran
    returncode, output, errors = ran
    if returncode != 0:
        detail = errors or output
        message = f"{binary} --version exited with {returncode}: {detail}"
        return _probe_failure(binary, ProbeStatus.FAILED, message, output)
    version = parse_claude_version(output)
    if version is None:
        message = f"{binary} --version printed no version: {output[:200]!r}"
        return _probe_failure(binary, ProbeStatus.UNPARSEABLE, message, output)
    level = DEFAULT_MATRIX.classify(version)
    message = DEFAULT_MATRIX.explain(version)
    return VersionProbe(binary, ProbeStatus.FOUND, version, level, message, output)


async def _run_version_command(
    binary: str, deadline_seconds: float, env: Mapping[str, str] | None
) -> tuple[int, str, str] | VersionProbe:
    """(exit code, stdout, stderr) of `<binary> --version`, or a probe saying why it did not run."""
    try:
        child = await spawn([binary, "--version"], stdout=PIPE, stderr=PIPE, env=env)
    except OSError as error:  # not found, not executable, not a program
        reason = error.strerror or str(error)
        return _probe_failure(binary, ProbeStatus.MISSING, f"cannot run {binary}: {reason}")
    try:
        stdout, stderr = await asyncio.wait_for(child.communicate(), deadline_seconds)
    except TimeoutError:
        _kill_process_group(child.pid)
        await child.wait()
        child.close()
        message = f"{binary} --version did not answer within {deadline_seconds:g} s"
        return _probe_failure(binary, ProbeStatus.TIMED_OUT, message)
    returncode = await child.wait()
    decoded = (stdout.decode("utf-8", "replace").strip(), stderr.decode("utf-8", "replace").strip())
    return returncode, *decoded


def _probe_failure(
    binary: str, status: ProbeStatus, message: str, output: str = ""
) -> VersionProbe:
    return VersionProbe(binary, status, None, CompatibilityLevel.UNKNOWN, message, output)


def _kill_process_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
