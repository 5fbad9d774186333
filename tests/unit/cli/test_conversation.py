"""cli/conversation: the Converse stream heals drops (from_sequence, dedupe, resend) — against
the fake AgentService on a real Unix socket."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import chat_events as ev
import grpc
import pytest
from chat_fake_daemon import SESSION_ID, WAIT_SECONDS, FakeAgentService

from betcode.cli.connection import DaemonClient, SessionNotFound
from betcode.cli.conversation import (
    ConnectionChange,
    ConversationStream,
    StreamItem,
    drop_reason,
    reconnect_delays,
)
from betcode.v1 import agent_pb2, common_pb2


def test_reconnect_delays_double_from_100ms_to_a_30s_cap() -> None:
    delays = list(itertools.islice(reconnect_delays(), 12))
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]


async def next_change(items: AsyncIterator[StreamItem]) -> ConnectionChange:
    """The next item, which must be a connection change."""
    item = await anext(items)
    assert isinstance(item, ConnectionChange), item
    return item


async def collect(items: AsyncIterator[StreamItem], count: int) -> list[agent_pb2.AgentEvent]:
    """The next ``count`` events (connection changes skipped)."""
    events: list[agent_pb2.AgentEvent] = []
    while len(events) < count:
        item = await asyncio.wait_for(anext(items), WAIT_SECONDS)
        if not isinstance(item, ConnectionChange):
            events.append(item)
    return events


class TestConversationStream:
    async def test_new_session_start_request(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, working_directory="/w", model="opus")
        items = stream.items()
        assert await anext(items) == ConnectionChange(connected=True)
        await fake.wait_attached()
        client_id, start = fake.starts[0]
        assert client_id == "cli-me"
        assert (start.working_directory, start.model) == ("/w", "opus")
        assert fake.created == {start.session_id} == {stream.session_id}  # the client chose it
        assert start.client_type == "cli"
        assert start.from_sequence == 0  # all of it: the session is new
        fake.publish(ev.input_lock("cli-me"), ev.session_info(start.session_id))
        await collect(items, 2)
        assert stream.session_id == start.session_id
        await items.aclose()

    async def test_a_drop_before_session_info_reconnects_to_the_same_new_session(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, working_directory="/w")
        items = stream.items()
        assert await anext(items) == ConnectionChange(connected=True)
        await fake.wait_attached()
        await stream.send_message("hello")
        await fake.next_request("message")
        fake.drop_streams()  # before the daemon's SessionInfo reached the client
        assert (await next_change(items)).connected is False
        assert (await next_change(items)).connected is True
        await fake.wait_attached()
        assert [start.session_id for _, start in fake.starts] == [stream.session_id] * 2
        assert fake.created == {stream.session_id}  # one session, not a second one
        again = await fake.next_request("message")  # not echoed yet: sent again, same key
        assert again.message.content == "hello"
        await items.aclose()

    async def test_drop_heals_from_last_sequence_without_duplicates(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        fake.overlap = 2  # the daemon may re-send what the client already has
        fake.publish(ev.session_info(SESSION_ID), ev.text("one "), ev.text("two "))
        stream = ConversationStream(client, session_id=SESSION_ID)
        items = stream.items()
        first = await collect(items, 3)
        fake.drop_streams()
        assert await anext(items) == ConnectionChange(False, 0.1, "dropped by the test")
        fake.publish(ev.text("three"))  # while the client is away
        await stream.send_message("sent while down")
        assert await anext(items) == ConnectionChange(connected=True)
        [third] = await collect(items, 1)
        assert [e.sequence for e in first] == [1, 2, 3]
        assert (third.sequence, third.text_delta.text) == (4, "three")
        assert [start.from_sequence for _, start in fake.starts] == [0, 3]
        message = await fake.next_request("message")
        assert message.message.content == "sent while down"
        await items.aclose()

    async def test_a_message_lost_in_a_drop_is_sent_again_with_its_key(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, session_id=SESSION_ID)
        items = stream.items()
        await anext(items)
        await stream.send_message("hello")
        first = await fake.next_request("message")
        fake.drop_streams()
        assert (await next_change(items)).connected is False
        assert (await next_change(items)).connected is True
        again = await fake.next_request("message")
        assert again.message.content == "hello"
        assert again.message.idempotency_key == first.message.idempotency_key
        await items.aclose()

    async def test_an_echoed_message_is_not_sent_again(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, session_id=SESSION_ID)
        items = stream.items()
        await anext(items)
        await stream.send_message("hello")
        await fake.next_request("message")
        fake.publish(ev.user_input("hello"))
        await collect(items, 1)
        fake.drop_streams()
        assert (await next_change(items)).connected is False
        assert (await next_change(items)).connected is True
        await stream.send_message("next")
        assert (await fake.next_request("message")).message.content == "next"
        await items.aclose()

    async def test_heartbeats_go_out_while_open_and_again_after_a_reconnect(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, session_id=SESSION_ID, heartbeat_interval=0.05)
        items = stream.items()
        assert await anext(items) == ConnectionChange(connected=True)
        await fake.wait_attached()

        async def heartbeats(count: int) -> None:
            for _ in range(count):  # nothing else is sent: every request is a heartbeat
                _client, request = await asyncio.wait_for(fake.requests.get(), WAIT_SECONDS)
                assert request == agent_pb2.AgentRequest(), request

        await heartbeats(2)  # the consumer reads nothing meanwhile: they do not wait for it
        fake.drop_streams()
        assert (await next_change(items)).connected is False
        assert (await next_change(items)).connected is True
        await fake.wait_attached()
        while not fake.requests.empty():  # sent on the first stream before the drop
            fake.requests.get_nowait()
        await heartbeats(2)
        await items.aclose()

    async def test_replayed_prompt_is_delivered_despite_its_old_sequence(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        fake.publish(ev.session_info(SESSION_ID), ev.permission("req-1", "Bash", {}))
        fake.pending = [fake.log[-1]]
        stream = ConversationStream(client, session_id=SESSION_ID, last_sequence=2)
        items = stream.items()
        [replayed] = await collect(items, 1)
        assert replayed.permission_request.is_replay
        assert replayed.sequence == 2
        assert stream.last_sequence == 2
        await items.aclose()

    async def test_fatal_error_event_ends_the_stream(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        fake.publish(ev.error("SESSION_CLOSED", "closed", fatal=True))
        stream = ConversationStream(client, session_id=SESSION_ID)
        kinds = [
            item.WhichOneof("event") if isinstance(item, agent_pb2.AgentEvent) else "connected"
            async for item in stream.items()
        ]
        assert kinds == ["connected", "error"]

    async def test_unknown_session_is_not_retried(self, client: DaemonClient) -> None:
        stream = ConversationStream(client, session_id="sess-unknown")
        with pytest.raises(SessionNotFound, match="sess-unknown"):
            async for _ in stream.items():
                pass

    async def test_catch_up_reads_history_in_batches_then_converse_continues(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        fake.publish(*(ev.text(f"{n} ") for n in range(5)))
        stream = ConversationStream(client, session_id=SESSION_ID)
        batches = [[e.sequence for e in batch] async for batch in stream.catch_up()]
        assert batches == [[1, 2], [3, 4], [5]]
        items = stream.items()
        await anext(items)
        fake.publish(ev.text("live"))
        [live] = await collect(items, 1)
        assert live.sequence == 6
        assert fake.starts[-1][1].from_sequence == 5
        await items.aclose()

    async def test_answers_and_cancel_on_the_wire(
        self, client: DaemonClient, fake: FakeAgentService
    ) -> None:
        stream = ConversationStream(client, session_id=SESSION_ID)
        items = stream.items()
        await anext(items)
        await stream.answer_permission(
            "req-1",
            common_pb2.PERMISSION_DECISION_ALLOW_WITH_EDIT,
            updated_input={"command": "ls -a"},
        )
        await stream.answer_question("q-1", {"Which?": "A"})
        await stream.cancel_turn()
        edit = (await fake.next_request("permission")).permission
        assert edit.decision == common_pb2.PERMISSION_DECISION_ALLOW_WITH_EDIT
        assert dict(edit.updated_input) == {"command": "ls -a"}
        answer = (await fake.next_request("question_response")).question_response
        assert (answer.question_id, dict(answer.answers)) == ("q-1", {"Which?": "A"})
        await fake.next_request("cancel")
        await items.aclose()


@pytest.mark.parametrize(
    ("status", "details", "reason"),
    [
        (
            grpc.StatusCode.UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: unix:/x.sock: No such file",
            "the daemon is not reachable",
        ),
        (grpc.StatusCode.UNAVAILABLE, "", "the daemon is not reachable"),
        (grpc.StatusCode.INTERNAL, "", "internal"),
        (grpc.StatusCode.UNAVAILABLE, "daemon shutting down", "daemon shutting down"),
        (grpc.StatusCode.ABORTED, "x" * 100, "x" * 79 + "…"),
    ],
    ids=["connect failure", "no details", "other status", "daemon's reason", "long"],
)
def test_drop_reason(status: grpc.StatusCode, details: str, reason: str) -> None:
    assert drop_reason(status, details) == reason
