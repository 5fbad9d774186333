"""The command palette's domain: which slash commands and agents a session offers, and which
paths below its directory complete a typed prefix. server/command_service.py serves it."""
