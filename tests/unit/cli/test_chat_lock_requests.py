"""A RequestInputLock waiting for the holder, in the chat: the holder is told who asks and
how long it has to keep the lock, the requester whom it waits for; the notice goes when the
request is settled (the lock moved, the holder kept it or sent input, or it lapsed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import chat_events as ev
from chat_fake_daemon import SESSION_ID, FakeAgentService
from chat_pilot import status_text, until

from betcode.cli.chat.app import ChatApp
from betcode.cli.chat.model import ChatModel
from betcode.cli.chat.widgets import LockNotice
from betcode.cli.connection import DaemonClient
from betcode.cli.conversation import ConversationStream
from betcode.v1 import agent_pb2

PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT
ASKED_OF_ME = "cli-phone asks for the input lock — send a message within 10 s to keep it"


def lock_requested(
    requester: str,
    holder: str,
    state: agent_pb2.InputLockRequestState.ValueType = PENDING,
    *,
    at: datetime | None = None,
    seconds: int = 10,
) -> agent_pb2.AgentEvent:
    """The daemon's InputLockRequested, stamped ``at`` (now by default) like a stored event."""
    at = at or datetime.now(UTC)
    event = agent_pb2.AgentEvent(
        input_lock_requested=agent_pb2.InputLockRequested(
            requested_by_client_id=requester, holder_client_id=holder, state=state
        )
    )
    event.timestamp.FromDatetime(at)
    event.input_lock_requested.request_deadline.FromDatetime(at + timedelta(seconds=seconds))
    return event


def make_app(client: DaemonClient) -> ChatApp:
    return ChatApp(
        client, ConversationStream(client, session_id=SESSION_ID, working_directory="/w")
    )


def notice(app: ChatApp) -> str:
    widget = app.query_one(LockNotice)
    return str(widget.render()) if widget.display else ""


async def test_the_holder_is_asked_and_the_notice_goes_once_it_kept_the_lock(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-me"), lock_requested("cli-phone", "cli-me"))
        await until(pilot, lambda: notice(app) == ASKED_OF_ME, "the holder's notice")
        assert app.query_one(LockNotice).has_class("asked")
        assert "input lock: you" in status_text(app)
        fake.publish(lock_requested("cli-phone", "cli-me", KEPT))
        await until(pilot, lambda: notice(app) == "", "the notice gone once kept")
        assert not app.query_one(LockNotice).has_class("asked")


async def test_the_holder_sending_a_message_answers_the_request_at_once(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-me"), lock_requested("cli-phone", "cli-me"))
        await until(pilot, lambda: notice(app) == ASKED_OF_ME, "the holder's notice")
        await pilot.press(*"mine", "enter")
        assert (await fake.next_request("message")).message.content == "mine"
        await until(pilot, lambda: notice(app) == "", "the notice gone once the holder sent")


async def test_the_requester_waits_for_the_holder_until_the_lock_moves(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.grant_lock = False  # the daemon answers once the holder had its 10 s
    app = make_app(client)
    async with app.run_test() as pilot:
        fake.publish(ev.input_lock("cli-phone"))
        await until(pilot, lambda: "read-only" in status_text(app), "read-only")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: len(fake.unary) == 1, "lock requested")
        fake.publish(lock_requested("cli-me", "cli-phone"))
        await until(pilot, lambda: notice(app) == "waiting for cli-phone (10 s)", "waiting")
        assert not app.query_one(LockNotice).has_class("asked")
        fake.publish(ev.input_lock("cli-me"))  # the lock moved: that settles the request
        await until(pilot, lambda: notice(app) == "", "the notice gone once the lock moved")
        assert "input lock: you" in status_text(app)


async def test_a_request_never_settled_lapses_after_its_deadline(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    # History of a daemon that restarted during the wait: PENDING with no settling event.
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    fake.publish(ev.input_lock("cli-me"), lock_requested("cli-phone", "cli-me", at=long_ago))
    fake.publish(ev.user_input("after the restart"))
    app = make_app(client)
    async with app.run_test() as pilot:
        await until(pilot, lambda: len(app.model.blocks) == 1, "the history")
        await until(pilot, lambda: not app.model.lock_requests_waiting, "the request lapsed")
        assert notice(app) == ""


def test_the_notice_names_clients_as_the_chat_does() -> None:
    me = "cli:alice@box:11-aaaaaaaa"
    model = ChatModel(me)
    model.apply(ev.input_lock(me))
    model.apply(lock_requested("cli:bob@laptop:7-bbbbbbbb", me, seconds=12))
    assert model.status.lock_notice == (
        "bob@laptop asks for the input lock — send a message within 12 s to keep it"
    )
    assert model.status.asked_for_lock
    # Asked by another terminal of the same person, the latest request is shown.
    model.apply(lock_requested("cli:alice@box:99-cccccccc", me))
    assert model.status.lock_notice.startswith("you, in another terminal asks for the input lock")
    # A request between two others is only mentioned.
    other = ChatModel("cli:carol@desk:5-dddddddd")
    other.apply(lock_requested("cli:bob@laptop:7-bbbbbbbb", me))
    assert other.status.lock_notice == "bob@laptop asked alice@box for the input lock"
    assert not other.status.asked_for_lock
    other.apply(ev.input_lock("cli:bob@laptop:7-bbbbbbbb"))
    assert other.status.lock_notice == ""
