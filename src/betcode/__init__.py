"""BetCode: a daemon that supervises the Claude Code CLI and serves its sessions over gRPC."""

__version__ = "0.1.0"
