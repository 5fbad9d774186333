"""What the mock model was sent: the conversation a CLI passed along with a prompt."""

from __future__ import annotations

import json

from betcode.devtools.mock_anthropic import MockAnthropic


def conversation_sent_with(mock: MockAnthropic, prompt: str) -> str:
    """The `messages` (as JSON text) of the latest request that carried `prompt`; other
    CLIs (an orphan finishing its turn) may have called the mock since."""
    for request in reversed(mock.message_requests):
        messages = json.dumps(request.body["messages"])
        if prompt in messages:
            return messages
    raise AssertionError(f"no request to the mock model carried {prompt!r}")
