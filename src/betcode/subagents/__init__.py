"""Subagents: claude sessions a parent session starts.

A subagent IS a session (sessions.manager) started with its own flags; this package adds the
pool that bounds them, orchestration plans (validated and scheduled as a DAG, stored so a daemon
restart resumes them) and permission delegation (forward to the parent's inbox, inherit grants,
auto-approve within limits). server/subagent_service.py is its thin gRPC face.
"""
