"""Permission and question prompts driven by Pilot: every key → the right answer on the wire."""

from __future__ import annotations

from typing import Any

import chat_events as ev
import pytest
from chat_fake_daemon import FakeAgentService
from chat_pilot import clickable, showing, transcript, until
from test_chat_app import make_app
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Button, Input, RadioSet, SelectionList, Static, TextArea

from betcode.cli.chat.app import ChatApp
from betcode.cli.chat.screens import (
    DenyMessageScreen,
    EditInputScreen,
    PermissionScreen,
    QuestionScreen,
)
from betcode.cli.connection import DaemonClient
from betcode.v1 import agent_pb2, common_pb2

ALLOW_ONCE = common_pb2.PERMISSION_DECISION_ALLOW_ONCE
ALLOW_SESSION = common_pb2.PERMISSION_DECISION_ALLOW_SESSION
ALLOW_WITH_EDIT = common_pb2.PERMISSION_DECISION_ALLOW_WITH_EDIT
DENY = common_pb2.PERMISSION_DECISION_DENY
DENY_WITH_INTERRUPT = common_pb2.PERMISSION_DECISION_DENY_WITH_INTERRUPT


async def show_permission(pilot: Pilot[None], app: ChatApp, fake: FakeAgentService) -> None:
    fake.publish(ev.permission("req-1", "Bash", {"command": "rm -rf build"}))
    await until(pilot, lambda: showing(app, PermissionScreen), "the permission prompt")


async def answered(
    pilot: Pilot[None], app: ChatApp, fake: FakeAgentService
) -> agent_pb2.PermissionResponse:
    response = (await fake.next_request("permission")).permission
    await until(pilot, lambda: not isinstance(app.screen, PermissionScreen), "prompt closed")
    assert response.request_id == "req-1"
    assert response.idempotency_key
    return response


@pytest.mark.parametrize(
    ("keys", "decision"),
    [
        (["y"], ALLOW_ONCE),
        (["1"], ALLOW_ONCE),
        (["a"], ALLOW_SESSION),
        (["2"], ALLOW_SESSION),
        (["x"], DENY_WITH_INTERRUPT),
        (["5"], DENY_WITH_INTERRUPT),
        (["escape"], DENY),
    ],
)
async def test_permission_key_sends_its_decision(
    client: DaemonClient, fake: FakeAgentService, keys: list[str], decision: int
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        screen = app.screen
        assert isinstance(screen, PermissionScreen)
        shown = str(screen.query_one("#permission-input", Static).content)
        assert shown == "command: rm -rf build"
        await pilot.press(*keys)
        response = await answered(pilot, app, fake)
        assert response.decision == decision
        assert not response.HasField("updated_input")


async def test_buttons_answer_like_their_keys(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test(size=(120, 40)) as pilot:
        await show_permission(pilot, app, fake)
        button = app.screen.query_one("#allow_session", Button)
        await until(pilot, lambda: clickable(app, button), "the button laid out")
        assert await pilot.click(button)
        assert (await answered(pilot, app, fake)).decision == ALLOW_SESSION


async def test_every_answer_is_on_screen_at_80x24_with_a_long_input(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        script = "\n".join(f"echo line {n}" for n in range(60))
        fake.publish(ev.permission("req-1", "Bash", {"command": script}))
        await until(pilot, lambda: showing(app, PermissionScreen), "the permission prompt")
        screen = app.screen
        buttons = list(screen.query(Button))
        await until(pilot, lambda: all(clickable(app, b) for b in buttons), "answers laid out")
        body = screen.query_one(".dialog-body").region
        for button in buttons:
            assert screen.region.contains_region(button.region), button.id
            assert not button.region.overlaps(body), button.id
        await pilot.press("y")
        assert (await answered(pilot, app, fake)).decision == ALLOW_ONCE


@pytest.mark.parametrize(
    ("key", "dialog"),
    [
        ("e", EditInputScreen),
        ("3", EditInputScreen),
        ("n", DenyMessageScreen),
        ("4", DenyMessageScreen),
    ],
)
async def test_keys_that_open_a_dialog(
    client: DaemonClient, fake: FakeAgentService, key: str, dialog: type[Screen[Any]]
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        await pilot.press(key)
        await until(pilot, lambda: showing(app, dialog), dialog.__name__)
        assert fake.requests.empty()  # nothing answered until the dialog is


async def test_deny_with_a_message(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        await pilot.press("n")
        await until(pilot, lambda: showing(app, DenyMessageScreen), "the message dialog")
        await pilot.press(*"use make clean", "enter")
        response = await answered(pilot, app, fake)
        assert (response.decision, response.message) == (DENY, "use make clean")


async def test_escape_from_the_deny_message_goes_back_to_the_prompt(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        await pilot.press("n")
        # A key is handled by the screen on top when its turn comes: escape before the dialog
        # is up would deny the request.
        await until(pilot, lambda: showing(app, DenyMessageScreen), "the message dialog")
        await pilot.press("escape")
        await until(pilot, lambda: showing(app, PermissionScreen), "back at the prompt")
        await pilot.press("y")
        assert (await answered(pilot, app, fake)).decision == ALLOW_ONCE


async def test_edit_input_sends_the_edited_json(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        await pilot.press("e")
        await until(pilot, lambda: showing(app, EditInputScreen), "the editor")
        screen = app.screen
        assert isinstance(screen, EditInputScreen)
        editor = screen.query_one(TextArea)
        assert editor.text == '{\n  "command": "rm -rf build"\n}'
        editor.select_all()
        await pilot.press(*'{"command": "rm -rf', "ctrl+s")
        error = screen.query_one("#edit-error", Static)
        await until(pilot, lambda: bool(str(error.content)), "the error shown")
        assert str(error.content).startswith("not valid JSON")
        assert app.screen is screen
        await pilot.press(*' build/tmp"}', "ctrl+s")
        response = await answered(pilot, app, fake)
        assert response.decision == ALLOW_WITH_EDIT
        assert dict(response.updated_input) == {"command": "rm -rf build/tmp"}


@pytest.mark.parametrize("live", [True, False], ids=["live", "history"])
async def test_an_input_edited_in_another_terminal_is_shown(
    client: DaemonClient, fake: FakeAgentService, live: bool
) -> None:
    asked = [
        ev.tool_start("toolu_1", "Bash", {"command": "rm -rf build"}),
        ev.permission("req-1", "Bash", {"command": "rm -rf build"}, tool_use_id="toolu_1"),
    ]
    edited = {"command": "rm -rf build/tmp"}
    answer = ev.resolved("req-1", "allowed", by="cli:bob@laptop:42-0a1b2c3d", edited=edited)
    app = make_app(client)
    if not live:
        fake.publish(*asked, answer)
    async with app.run_test() as pilot:
        if live:
            fake.publish(*asked)
            await until(pilot, lambda: showing(app, PermissionScreen), "the permission prompt")
            fake.publish(answer)
        notice = ("notice", "Bash: allowed with an edited input by bob@laptop")
        await until(pilot, lambda: notice in transcript(app), "the resolution noted")
        assert ("tool", "… Bash(rm -rf build/tmp)") in transcript(app)
        # The prompt is popped after the transcript is drawn, in the same frame.
        await until(pilot, lambda: len(app.screen_stack) == 1, "the prompt closed")
        assert fake.requests.empty()


async def test_prompt_resolved_elsewhere_disappears(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        await pilot.press("n")  # even with a dialog open on top of it
        fake.publish(ev.resolved("req-1", "allowed", by="cli-phone"))
        await until(pilot, lambda: len(app.screen_stack) == 1, "every prompt screen closed")
        assert ("notice", "Bash: allowed by cli-phone") in transcript(app)
        assert fake.requests.empty()


async def test_prompts_come_one_after_another(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_permission(pilot, app, fake)
        fake.publish(ev.question("q-1", ("Which?", ["A", "B"], False)))
        await pilot.press("y")
        await answered(pilot, app, fake)
        await until(pilot, lambda: showing(app, QuestionScreen), "the question next")


async def show_question(
    pilot: Pilot[None], app: ChatApp, fake: FakeAgentService, *prompts: tuple[str, list[str], bool]
) -> QuestionScreen:
    fake.publish(ev.question("q-1", *prompts))
    await until(pilot, lambda: showing(app, QuestionScreen), "the question prompt")
    screen = app.screen
    assert isinstance(screen, QuestionScreen)
    return screen


async def question_answers(fake: FakeAgentService) -> dict[str, str]:
    response = (await fake.next_request("question_response")).question_response
    assert response.question_id == "q-1"
    return dict(response.answers)


async def test_single_select_question(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        screen = await show_question(pilot, app, fake, ("Which?", ["Red", "Green", "Blue"], False))
        screen.query_one(RadioSet).focus()
        await pilot.press("down", "down", "enter", "ctrl+s")
        assert await question_answers(fake) == {"Which?": "Blue"}
        await until(pilot, lambda: len(app.screen_stack) == 1, "closed")


async def test_multi_select_question_with_free_text(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        screen = await show_question(
            pilot,
            app,
            fake,
            ("Which?", ["Red", "Green"], False),
            ("Toppings?", ["Cheese", "Ham", "Olives"], True),
        )
        await pilot.press("ctrl+s")  # nothing picked yet
        error = screen.query_one("#question-error", Static)
        await until(pilot, lambda: bool(str(error.content)), "the error shown")
        assert str(error.content) == "Answer every question (pick or type): Which?"
        screen.query_one("#other-0", Input).focus()
        await pilot.press(*"Purple")
        screen.query_one(SelectionList).focus()
        await pilot.press("space", "down", "down", "space")
        screen.query_one("#other-1", Input).focus()
        await pilot.press(*"Basil", "ctrl+s")
        assert await question_answers(fake) == {
            "Which?": "Purple",
            "Toppings?": "Cheese, Olives, Basil",
        }


async def test_declining_a_question_denies_it(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await show_question(pilot, app, fake, ("Which?", ["A"], False))
        await pilot.press("escape")
        response = (await fake.next_request("permission")).permission
        assert (response.request_id, response.decision) == ("q-1", DENY)
        assert response.message == "The user declined to answer."


async def test_replayed_prompt_after_an_answer_comes_back(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    """An answer lost on the way: the daemon re-sends the request (is_replay) on reattach and
    the prompt shows again; answered twice, the daemon keeps the first."""
    app = make_app(client)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        await show_permission(pilot, app, fake)
        await pilot.press("y")
        await answered(pilot, app, fake)
        fake.pending = [fake.log[-1]]
        fake.drop_streams()
        await until(pilot, lambda: showing(app, PermissionScreen), "prompt again")
