"""Shared test harness: the pinned real Claude Code CLI, run offline against the mock model.

`paths` says where the pinned binary lives, `environment` builds the isolated child
environment, `claude_process` runs the CLI in its own process group, and `session` drives it
through BetCode's own NDJSON codec.
"""
