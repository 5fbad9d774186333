"""The chat app driven by Pilot against the fake daemon: streaming, tools, status, input lock,
Ctrl-C, history and reconnection. Prompts are in test_chat_prompts.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import chat_events as ev
import grpc.aio
import pytest
from chat_fake_daemon import SESSION_ID, FakeAgentService, serve
from chat_pilot import showing, status_text, transcript, until
from textual import events
from textual.widgets import Collapsible, Static
from textual.widgets._markdown import MarkdownH1

from betcode.cli.chat.app import ChatApp
from betcode.cli.chat.screens import PermissionScreen
from betcode.cli.chat.texts import SPINNER
from betcode.cli.chat.widgets import PromptArea, StatusBar, ToolView, Transcript
from betcode.cli.connection import DaemonClient
from betcode.cli.conversation import ConversationStream


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_app(
    client: DaemonClient, session_id: str = SESSION_ID, clock: FakeClock | None = None
) -> ChatApp:
    stream = ConversationStream(client, session_id=session_id, working_directory="/w")
    return ChatApp(client, stream, clock=clock or FakeClock())


async def test_streamed_text_is_rendered_as_markdown(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.user_input("hi"), ev.text("# Plan\n\n"), ev.text("Step **one**"))
        await until(
            pilot,
            lambda: ("assistant", "# Plan\n\nStep **one**") in transcript(app),
            "both deltas shown",
        )
        fake.publish(ev.text(" and two.", complete=True))
        full = "# Plan\n\nStep **one** and two."
        await until(pilot, lambda: ("assistant", full) in transcript(app), "the whole text")
        assert transcript(app) == [("user", "hi"), ("assistant", full)]
        assert len(app.query(MarkdownH1)) == 1


async def test_a_message_is_sent_and_shown_once_echoed(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await pilot.press(*"hello", "ctrl+j", *"there", "enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "hello\nthere"
        # Cleared once the write returns, which may be after the daemon has the message.
        prompt = app.query_one(PromptArea)
        await until(pilot, lambda: prompt.text == "", "the input cleared")
        fake.publish(ev.user_input("hello\nthere"))
        await until(pilot, lambda: transcript(app) == [("user", "hello\nthere")], "the echo")


async def test_a_pasted_text_with_new_lines_is_not_sent_until_enter(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        prompt = app.query_one(PromptArea)
        app.post_message(events.Paste("first line\nsecond line"))  # as the driver does
        await until(pilot, lambda: prompt.text == "first line\nsecond line", "pasted")
        assert fake.requests.empty()
        await pilot.press("enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "first line\nsecond line"


async def test_tool_call_shown_at_start_then_completed_with_error_highlighted(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.tool_start("t1", "Bash", {"command": "ls /nope"}))
        await until(pilot, lambda: transcript(app) == [("tool", "… Bash(ls /nope)")], "start")
        tool = app.query_one(ToolView)
        assert not tool.has_class("error")
        fake.publish(ev.tool_result("t1", "ls: cannot access '/nope'", is_error=True))
        await until(pilot, lambda: transcript(app) == [("tool", "✗ Bash(ls /nope)")], "result")
        assert tool.has_class("error")
        assert tool.collapsed
        preview = tool.query_one(".tool-preview", Static)
        assert str(preview.content) == "⎿ ls: cannot access '/nope'"
        await until(pilot, lambda: preview.display, "collapsed: the result at a glance")
        tool.query_one("CollapsibleTitle").focus()
        await pilot.press("enter")
        await until(pilot, lambda: not tool.collapsed, "expanded")
        output = str(tool.query_one(".tool-output", Static).content)
        assert output == "ls: cannot access '/nope'"
        await until(pilot, lambda: not preview.display, "expanded: the whole result instead")


async def test_typing_while_the_transcript_has_focus_goes_to_the_input(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.tool_start("t1", "Bash", {"command": "ls"}), ev.tool_result("t1", "a"))
        await until(pilot, lambda: transcript(app) == [("tool", "✓ Bash(ls)")], "the tool")
        app.query_one(ToolView).query_one("CollapsibleTitle").focus()
        await pilot.press(*"jk next", "enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "jk next"


async def test_page_keys_in_the_input_scroll_the_conversation(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        fake.publish(*(ev.user_input(f"message {n}") for n in range(40)))
        await until(pilot, lambda: len(transcript(app)) == 40, "a long conversation")
        view = app.query_one(Transcript)
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y > 0, "at the end")
        await pilot.press(*"draft", "pageup")
        await until(pilot, lambda: view.scroll_y < view.max_scroll_y, "scrolled up")
        await pilot.press("pagedown")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y, "back at the end")
        assert app.query_one(PromptArea).text == "draft"


async def test_the_view_follows_a_growing_answer_unless_scrolled_up(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(Transcript)
        fake.publish(ev.user_input("go"), ev.text("start\n\n"))
        await until(pilot, lambda: len(transcript(app)) == 2, "the answer begins")
        fake.publish(*(ev.text(f"paragraph {n}\n\n") for n in range(40)))
        await until(pilot, lambda: "paragraph 39" in transcript(app)[-1][1], "the answer grew")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y > 0, "followed")
        await pilot.press("pageup")
        await until(pilot, lambda: view.scroll_y < view.max_scroll_y, "scrolled up")
        reading = view.scroll_y
        fake.publish(*(ev.text(f"more {n}\n\n") for n in range(20)))
        await until(pilot, lambda: "more 19" in transcript(app)[-1][1], "grew again")
        await pilot.pause()  # one more refresh: an anchored view would have moved by now
        assert view.scroll_y == reading < view.max_scroll_y  # the reader is left in place
        await pilot.press(*"next", "enter")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y, "back at the end")


async def test_successful_tool_is_marked_done(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.tool_start("t1", "Read", {"file_path": "a.py"}), ev.tool_result("t1", "x"))
        await until(pilot, lambda: transcript(app) == [("tool", "✓ Read(a.py)")], "done")
        assert app.query_one(ToolView).has_class("done")
        preview = app.query_one(".tool-preview", Static)
        await until(pilot, lambda: preview.display, "the result at a glance")
        assert isinstance(app.query_one(ToolView), Collapsible)


async def test_status_bar_follows_session_activity_tokens_and_cost(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.session_info(SESSION_ID, model="claude-opus"), ev.status(ev.THINKING))
        await until(pilot, lambda: "thinking" in status_text(app), "thinking")
        assert f"session {SESSION_ID}" in status_text(app)
        assert "claude-opus" in status_text(app)
        fake.publish(ev.tool_start("t1", "Grep", {"pattern": "x"}), ev.status(ev.EXECUTING_TOOL))
        await until(pilot, lambda: "running Grep" in status_text(app), "running a tool")
        fake.publish(ev.status(ev.WAITING))
        await until(pilot, lambda: "waiting for you" in status_text(app), "waiting")
        fake.publish(ev.usage(1200, 300, 0.0123), ev.turn_complete(), ev.status(ev.IDLE))
        await until(pilot, lambda: "1,500 tokens · $0.0123" in status_text(app), "usage")
        await until(pilot, lambda: "ready" in status_text(app), "idle")
        fake.publish(ev.status(ev.COMPACTING))
        await until(pilot, lambda: "compacting" in status_text(app), "compacting")
        fake.publish(ev.status(ev.RESTARTING))
        await until(pilot, lambda: "claude is restarting" in status_text(app), "restarting")
        fake.publish(ev.status(ev.CRASHED))
        crashed = "claude crashed; send a message to restart it"
        await until(pilot, lambda: crashed in status_text(app), "crashed")
        fake.publish(ev.status(ev.ERROR, "claude exited with code 1"))
        await until(pilot, lambda: "│  error" in status_text(app), "error")
        assert ("notice", "claude exited with code 1") in transcript(app)


async def test_status_bar_says_while_the_daemon_is_gone(
    client: DaemonClient, fake: FakeAgentService, server: grpc.aio.Server, socket_path: Path
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        fake.publish(ev.user_input("before"))
        await until(pilot, lambda: transcript(app) == [("user", "before")], "live")
        await server.stop(grace=0)
        gone = "disconnected (the daemon is not reachable); retrying in"
        await until(pilot, lambda: gone in status_text(app), "disconnected")
        assert app.query_one(StatusBar).has_class("disconnected")
        fake.publish(ev.user_input("while away"))
        restarted = await serve(fake, socket_path)
        try:
            await until(pilot, lambda: "disconnected" not in status_text(app), "reconnected")
            assert not app.query_one(StatusBar).has_class("disconnected")
            expected = [("user", "before"), ("user", "while away")]
            await until(pilot, lambda: transcript(app) == expected, "the missed event, once")
        finally:
            await restarted.stop(grace=0)


async def test_the_spinner_turns_while_claude_works_and_stops_when_it_waits(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.session_info(SESSION_ID), ev.status(ev.THINKING))
        await until(pilot, lambda: "thinking" in status_text(app), "thinking")
        frames: set[str] = set()

        def three_frames_seen() -> bool:
            frames.add(status_text(app))
            return len(frames) >= 3

        await until(pilot, three_frames_seen, "three different frames")
        assert all(any(f"{frame} thinking" in text for frame in SPINNER) for text in frames)
        fake.publish(ev.status(ev.WAITING))
        await until(pilot, lambda: "│  waiting for you" in status_text(app), "no spinner")


def record_notifications(app: ChatApp, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages of the app's notifications, kept (Textual drops them once they expire)."""
    shown: list[str] = []
    notify = app.notify

    def recording(message: str, **options: Any) -> None:
        shown.append(message)
        notify(message, **options)

    monkeypatch.setattr(app, "notify", recording)
    return shown


async def test_read_only_until_the_lock_is_requested_and_granted(
    client: DaemonClient, fake: FakeAgentService, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(client)
    notified = record_notifications(app, monkeypatch)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-phone"), ev.permission("req-1", "Bash", {"command": "ls"}))
        read_only = "read-only: cli-phone has the input lock; press ctrl+l to request it"
        await until(pilot, lambda: read_only in status_text(app), "read-only status")
        assert app.query_one(StatusBar).has_class("read-only")
        assert not isinstance(app.screen, PermissionScreen)  # only the holder answers
        await pilot.press(*"hi", "enter")
        # Pilot.press may return before the input handled the keys: the refusal is waited for,
        # so the message is refused before the lock below can be granted.
        await until(pilot, lambda: read_only in notified, "the message refused")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: showing(app, PermissionScreen), "prompt shown")
        assert fake.unary == [("RequestInputLock", ("cli-me", fake.unary[0][1][1]))]
        assert fake.unary[0][1][1].session_id == SESSION_ID
        assert "read-only" not in status_text(app)
        assert fake.requests.empty()  # the refused message was not sent once the lock came


async def test_holder_of_the_lock_answers_prompts(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-me"), ev.permission("req-1", "Bash", {"command": "ls"}))
        await until(pilot, lambda: showing(app, PermissionScreen), "prompt shown")
        assert "read-only" not in status_text(app)
        assert not app.query_one(StatusBar).has_class("read-only")


async def test_lock_requested_but_not_granted_waits_for_the_handover(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.grant_lock = False  # the holder is asked first; the lock moves later, or not
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-phone"), ev.permission("req-1", "Bash", {"command": "ls"}))
        await until(pilot, lambda: "read-only" in status_text(app), "read-only")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: len(fake.unary) == 1, "lock requested")
        assert "read-only: cli-phone" in status_text(app)
        assert not isinstance(app.screen, PermissionScreen)
        fake.publish(ev.input_lock("cli-me"))  # the handover
        await until(pilot, lambda: showing(app, PermissionScreen), "prompt once the lock moved")
        assert "read-only" not in status_text(app)


async def test_the_screen_stays_live_while_the_holder_may_answer(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.lock_answer = asyncio.Event()
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-phone"))
        await until(pilot, lambda: "read-only" in status_text(app), "read-only")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: len(fake.unary) == 1, "lock requested")
        fake.publish(ev.user_input("typed on the phone"))
        await pilot.press(*"draft")
        await until(pilot, lambda: ("user", "typed on the phone") in transcript(app), "live")
        prompt = app.query_one(PromptArea)
        await until(pilot, lambda: prompt.text == "draft", "typing still reaches the input")
        fake.lock_answer.set()
        await until(pilot, lambda: "read-only" not in status_text(app), "the lock moved")


async def test_ctrl_c_once_cancels_the_turn_twice_quits(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    clock = FakeClock()
    app = make_app(client, clock=clock)
    async with app.run_test() as pilot:
        fake.publish(ev.session_info(SESSION_ID), ev.status(ev.THINKING))
        await until(pilot, lambda: app.model.turn_running, "a running turn")
        await pilot.press("ctrl+c")
        cancel = await fake.next_request("cancel")
        assert cancel.cancel.reason
        assert app.is_running
        clock.now += 1.0
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running, "quit")
    assert app.return_code == 0
    assert fake.requests.empty()  # quitting sent no cancel: the session keeps running


async def test_ctrl_c_when_nothing_runs_quits(client: DaemonClient, fake: FakeAgentService) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.status(ev.IDLE))
        await until(pilot, lambda: "ready" in status_text(app), "idle")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running, "quit")
    assert fake.requests.empty()


async def test_history_is_loaded_batched_then_live_from_its_last_sequence(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.publish(
        ev.session_info(SESSION_ID),
        ev.user_input("earlier"),
        ev.text("old answer", complete=True),
        ev.permission("req-0", "Bash", {}),
        ev.resolved("req-0", "allowed"),
        ev.turn_complete(),
    )
    app = make_app(client)
    async with app.run_test() as pilot:
        await until(pilot, lambda: len(fake.starts) == 1, "Converse opened")
        assert [r.from_sequence for r in fake.resumes] == [0]
        assert fake.starts[0][1].from_sequence == 6
        fake.publish(ev.user_input("now"))
        expected = [
            ("user", "earlier"),
            ("assistant", "old answer"),
            ("notice", "Bash: allowed"),
            ("user", "now"),
        ]
        await until(pilot, lambda: transcript(app) == expected, "history then live")
        assert not isinstance(app.screen, PermissionScreen)


async def test_reconnect_resumes_from_the_last_sequence_and_shows_nothing_twice(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.overlap = 3  # the daemon re-sends events the app already showed
    app = make_app(client)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        fake.publish(ev.user_input("go"), ev.text("one "), ev.tool_start("t1", "Bash", {}))
        await until(pilot, lambda: len(transcript(app)) == 3, "first part")
        fake.drop_streams()
        fake.publish(ev.tool_result("t1", "ok"))  # while the app is away
        await fake.wait_attached()
        fake.publish(ev.text("two"))
        expected = [("user", "go"), ("assistant", "one "), ("tool", "✓ Bash"), ("assistant", "two")]
        await until(pilot, lambda: transcript(app) == expected, "healed, once each")
        assert fake.starts[1][1].from_sequence == 3
        # The status bar is drawn after the transcript, in the same frame.
        await until(pilot, lambda: "disconnected" not in status_text(app), "connected")


async def test_unknown_session_exits_with_its_code(client: DaemonClient) -> None:
    app = make_app(client, session_id="sess-unknown")
    async with app.run_test() as pilot:
        await until(pilot, lambda: not app.is_running, "exit")
    assert app.return_code == 6
