"""Where things are: the repository, the pinned Claude Code CLI, the contract fixtures."""

from __future__ import annotations

import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CLAUDE_PACKAGE_JSON = REPO_ROOT / "tools" / "claude-code" / "package.json"
CLAUDE_BIN = REPO_ROOT / "tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
CONTRACTS_DIR = REPO_ROOT / "tests" / "contracts"


class PinnedClaudeMissingError(FileNotFoundError):
    """The pinned CLI is not installed in the repository."""


def pinned_claude_version() -> str:
    """The exact @anthropic-ai/claude-code version the project pins (tools/claude-code)."""
    manifest = json.loads(CLAUDE_PACKAGE_JSON.read_text())
    return str(manifest["dependencies"]["@anthropic-ai/claude-code"])


def require_pinned_claude() -> Path:
    """The pinned CLI binary; PinnedClaudeMissingError telling how to install it otherwise."""
    if not CLAUDE_BIN.is_file():
        raise PinnedClaudeMissingError(
            f"the pinned Claude Code CLI is not installed at {CLAUDE_BIN}; "
            f"run scripts/setup (it installs the exact version from {CLAUDE_PACKAGE_JSON})"
        )
    return CLAUDE_BIN
