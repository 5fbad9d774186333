"""Modal prompts: a permission request, its deny-message and input-edit dialogs, and questions.

Each screen dismisses with the user's answer (or None); the app sends it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import (
    Button,
    Input,
    Label,
    RadioButton,
    RadioSet,
    SelectionList,
    Static,
    TextArea,
)
from textual.widgets._button import ButtonVariant

from betcode.cli.chat.actions import PermissionAnswer, question_answers
from betcode.cli.chat.state import Choice, PermissionPrompt, Question, QuestionPrompt
from betcode.cli.chat.texts import expiry_text
from betcode.cli.chat.widgets import pretty_json, readable_input
from betcode.v1 import common_pb2

ALLOW_ONCE = common_pb2.PERMISSION_DECISION_ALLOW_ONCE
ALLOW_SESSION = common_pb2.PERMISSION_DECISION_ALLOW_SESSION
ALLOW_WITH_EDIT = common_pb2.PERMISSION_DECISION_ALLOW_WITH_EDIT
DENY = common_pb2.PERMISSION_DECISION_DENY
DENY_WITH_INTERRUPT = common_pb2.PERMISSION_DECISION_DENY_WITH_INTERRUPT
QUESTION_KEYS = "space picks · tab: next field · ctrl+s: submit · Esc: decline"


PERMISSION_ANSWERS: tuple[tuple[str, str, ButtonVariant], ...] = (
    ("y  Allow once", "allow_once", "success"),
    ("a  Allow for this session", "allow_session", "primary"),
    ("e  Edit the input, then allow", "edit", "default"),
    ("n  Deny, and tell claude what to do instead", "deny_with_message", "warning"),
    ("x  Deny and interrupt the turn", "deny_and_interrupt", "error"),
)


class PermissionScreen(ModalScreen[PermissionAnswer]):
    """Claude asks to run a tool. y/1 allow once · a/2 allow for the session · e/3 edit the
    input, then allow · n/4 deny with a message · x/5 deny and interrupt · Esc deny."""

    BINDINGS = [  # noqa: RUF012 (Textual's own declaration style)
        Binding("y,1", "allow_once", "allow once"),
        Binding("a,2", "allow_session", "allow for session"),
        Binding("e,3", "edit", "edit input"),
        Binding("n,4", "deny_with_message", "deny…"),
        Binding("x,5", "deny_and_interrupt", "deny + interrupt"),
        Binding("escape", "deny", "deny", show=False),
    ]

    def __init__(self, prompt: PermissionPrompt) -> None:
        super().__init__(classes="prompt-screen")
        self.prompt = prompt
        self.request_id = prompt.request_id

    def compose(self) -> ComposeResult:
        prompt = self.prompt
        with Vertical(id="permission", classes="dialog"):
            with Vertical(classes="dialog-head"):
                yield Label(Text(f"Allow {prompt.tool_name}?"), classes="dialog-title")
                yield from self._compose_facts()
            with VerticalScroll(classes="dialog-body"):
                yield Static(readable_input(prompt.input), id="permission-input")
            # One answer per line, its key first (as in Claude Code): fits any width.
            with Vertical(classes="dialog-buttons"):
                for label, action, variant in PERMISSION_ANSWERS:
                    yield Button(label, id=action, variant=variant, compact=True)

    def _compose_facts(self) -> ComposeResult:
        prompt = self.prompt
        if prompt.description:
            yield Static(Text(prompt.description), classes="dialog-text")
        expires = expiry_text(prompt.expires_at, datetime.now(UTC)) if prompt.expires_at else ""
        for label, value in (
            ("why", prompt.decision_reason),
            ("path", prompt.blocked_path),
            ("waits until", expires),
        ):
            if value:
                yield Static(Text(f"{label}: {value}"), classes="dialog-text")

    @on(Button.Pressed)
    async def _button(self, event: Button.Pressed) -> None:
        await self.run_action(event.button.id or "")

    def action_allow_once(self) -> None:
        self.dismiss(PermissionAnswer(ALLOW_ONCE))

    def action_allow_session(self) -> None:
        self.dismiss(PermissionAnswer(ALLOW_SESSION))

    def action_deny(self) -> None:
        self.dismiss(PermissionAnswer(DENY, message="Denied by the user."))

    def action_deny_and_interrupt(self) -> None:
        self.dismiss(PermissionAnswer(DENY_WITH_INTERRUPT, message="Denied by the user."))

    def action_deny_with_message(self) -> None:
        def answered(message: str | None) -> None:
            if message is not None:
                self.dismiss(PermissionAnswer(DENY, message=message or "Denied by the user."))

        self.app.push_screen(DenyMessageScreen(self.prompt.tool_name), answered)

    def action_edit(self) -> None:
        def edited(updated: dict[str, Any] | None) -> None:
            if updated is not None:
                self.dismiss(PermissionAnswer(ALLOW_WITH_EDIT, updated_input=updated))

        self.app.push_screen(EditInputScreen(self.prompt.input), edited)


class DenyMessageScreen(ModalScreen[str | None]):
    """What to tell claude instead. Enter denies with this text; Esc goes back."""

    BINDINGS = [Binding("escape", "back", "back")]  # noqa: RUF012

    def __init__(self, tool_name: str) -> None:
        super().__init__(classes="prompt-screen")
        self.tool_name = tool_name

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(f"Deny {self.tool_name}: what should claude do instead?"))
            yield Input(placeholder="message for claude (Enter to deny, Esc to go back)")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_back(self) -> None:
        self.dismiss(None)


class EditInputError(ValueError):
    """The edited tool input is not a JSON object."""


def parse_edited_input(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise EditInputError(f"not valid JSON: {error.msg} (line {error.lineno})") from None
    if not isinstance(value, dict):
        raise EditInputError("the tool input must be a JSON object ({...})")
    return value


class EditInputScreen(ModalScreen[dict[str, Any] | None]):
    """The tool input as JSON, editable; ctrl+s allows with the edited input, Esc goes back."""

    BINDINGS = [  # noqa: RUF012
        Binding("ctrl+s", "save", "allow with this input", priority=True),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, tool_input: dict[str, Any]) -> None:
        super().__init__(classes="prompt-screen")
        self.tool_input = tool_input

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Edit the tool input (JSON). ctrl+s: allow with it · Esc: back")
            yield TextArea(pretty_json(self.tool_input), id="edit-input", soft_wrap=True)
            yield Static("", id="edit-error", classes="error")

    def action_save(self) -> None:
        text = self.query_one("#edit-input", TextArea).text
        try:
            updated = parse_edited_input(text)
        except EditInputError as error:
            self.query_one("#edit-error", Static).update(Text(str(error)))
            return
        self.dismiss(updated)

    def action_back(self) -> None:
        self.dismiss(None)


class QuestionScreen(ModalScreen[dict[str, str] | None]):
    """Claude asks the user; one picker per question (radio for single, checkboxes for multi)
    plus free text ("Other"). ctrl+s submits; Esc declines to answer."""

    AUTO_FOCUS = "#pick-0"
    BINDINGS = [  # noqa: RUF012
        Binding("ctrl+s", "submit", "submit", priority=True),
        Binding("escape", "decline", "decline"),
    ]

    def __init__(self, prompt: QuestionPrompt) -> None:
        super().__init__(classes="prompt-screen")
        self.prompt = prompt
        self.request_id = prompt.request_id

    def compose(self) -> ComposeResult:
        with Vertical(id="question", classes="dialog"):
            yield Static(QUESTION_KEYS, classes="dialog-text dialog-head")
            with VerticalScroll(classes="dialog-body"):
                for index, question in enumerate(self.prompt.questions):
                    yield from self._compose_question(index, question)
            with Vertical(classes="dialog-buttons"):
                yield Static("", id="question-error", classes="error")
                yield Button("ctrl+s  Submit", id="submit", variant="primary", compact=True)

    def _compose_question(self, index: int, question: Question) -> ComposeResult:
        title = f"[{question.header}] {question.text}" if question.header else question.text
        yield Label(Text(title), classes="dialog-title")
        if question.multi_select:
            yield SelectionList[int](
                *((_choice_label(c), n) for n, c in enumerate(question.choices)),
                id=f"pick-{index}",
            )
        else:
            with RadioSet(id=f"pick-{index}"):
                for choice in question.choices:
                    yield RadioButton(_choice_label(choice))
        yield Input(placeholder="Other: type your own answer", id=f"other-{index}")

    def picked(self) -> list[list[Choice]]:
        picks: list[list[Choice]] = []
        for index, question in enumerate(self.prompt.questions):
            if question.multi_select:
                chosen = self.query_one(f"#pick-{index}", SelectionList).selected
            else:
                pressed = self.query_one(f"#pick-{index}", RadioSet).pressed_index
                chosen = [pressed] if pressed >= 0 else []
            picks.append([question.choices[n] for n in chosen])
        return picks

    def typed(self) -> list[str]:
        count = len(self.prompt.questions)
        return [self.query_one(f"#other-{index}", Input).value for index in range(count)]

    @on(Button.Pressed, "#submit")
    def action_submit(self) -> None:
        answers = question_answers(self.prompt, self.picked(), self.typed())
        unanswered = [text for text, answer in answers.items() if not answer]
        if unanswered:
            self.query_one("#question-error", Static).update(
                Text(f"Answer every question (pick or type): {unanswered[0]}")
            )
            return
        self.dismiss(answers)

    def action_decline(self) -> None:
        self.dismiss(None)


def _choice_label(choice: Choice) -> Text:
    text = Text(choice.answer)
    if choice.description:
        text.append(f" — {choice.description}", style="dim")
    return text
