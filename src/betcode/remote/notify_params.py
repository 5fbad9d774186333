"""The parameters of a tunnel control frame asking the relay for an attention notification
(tunnel/attention.py sends them, relay/notifications.py reads them)."""

from __future__ import annotations

NOTIFY_PARAM = "notify"
SESSION_PARAM = "session_id"
ID_PARAM = "notification_id"
TITLE_PARAM = "title"
