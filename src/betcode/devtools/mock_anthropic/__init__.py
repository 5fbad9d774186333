"""An offline stand-in for the Anthropic Messages API, scripted by scenarios.

In-process: `with MockAnthropic() as mock: ... mock.base_url ... mock.message_requests`.
As a process: `python -m betcode.devtools.mock_anthropic --port 0` prints its base URL first.
Pick a scenario with a `SCN:<name>` token (plus an optional JSON object of arguments) in the
user's text, or script replies with `mock.enqueue(Reply(...))`. Scenario names and arguments:
`python -m betcode.devtools.mock_anthropic --list`.
"""

from betcode.devtools.mock_anthropic.ask_input import question_text
from betcode.devtools.mock_anthropic.replies import Reply, TextBlock, ToolUseBlock, text_reply
from betcode.devtools.mock_anthropic.scenarios import SCENARIOS, Scenario, StepContext
from betcode.devtools.mock_anthropic.server import MockAnthropic, RecordedRequest

__all__ = [
    "SCENARIOS",
    "MockAnthropic",
    "RecordedRequest",
    "Reply",
    "Scenario",
    "StepContext",
    "TextBlock",
    "ToolUseBlock",
    "question_text",
    "text_reply",
]
