"""Limits for many agents (docs/LIMITS.md): cost caps, a cap on running turns with its queue,
and the memory of each session's claude."""
