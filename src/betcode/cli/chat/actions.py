"""What the user's keys mean: the Ctrl-C rule, a permission answer, question answers."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from betcode.cli.chat.state import Choice, QuestionPrompt
from betcode.v1 import common_pb2


@dataclass(frozen=True)
class PermissionAnswer:
    decision: common_pb2.PermissionDecision.ValueType
    message: str = ""
    updated_input: dict[str, Any] | None = None


def question_answers(
    prompt: QuestionPrompt, picked: list[list[Choice]], other: list[str]
) -> dict[str, str]:
    """UserQuestionResponse.answers: question text → answer. Several picks are joined with
    ", "; a typed "Other" answer replaces a single pick and joins a multi-select."""
    answers: dict[str, str] = {}
    for question, choices, typed in zip(prompt.questions, picked, other, strict=True):
        parts = [choice.answer for choice in choices]
        typed = typed.strip()
        if typed:
            parts = [*parts, typed] if question.multi_select else [typed]
        answers[question.text] = ", ".join(parts)
    return answers


class CtrlC(enum.Enum):
    CANCEL_TURN = "cancel"
    QUIT = "quit"


class CtrlCPolicy:
    """Ctrl-C cancels the running turn; a second press within ``window`` seconds, or a press
    while nothing runs, quits. Time is passed in, so the rule is tested without waiting."""

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self._last_cancel_at: float | None = None

    def press(self, now: float, turn_running: bool) -> CtrlC:
        recent = self._last_cancel_at is not None and now - self._last_cancel_at <= self.window
        if recent or not turn_running:
            return CtrlC.QUIT
        self._last_cancel_at = now
        return CtrlC.CANCEL_TURN
