"""Requests that wait: TTL expiry with a soft deny, reminders at 1 h and 24 h (event, log,
notify command), extension of the TTL by client activity. The bridge's clock is moved by the
test; the sweep is called directly, except where the sweep task itself is under test."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest
from bridge_world import World, WorldFactory, permission

from betcode.config.settings import PermissionSettings
from betcode.permissions.decisions import AnswerError, ClientAnswer
from betcode.permissions.sweeper import SweepReport
from betcode.v1 import common_pb2

Decision = common_pb2.PermissionDecision
ECHO = {"command": "echo hi", "description": "Say hi"}
HOUR, DAY = 3600.0, 86_400.0
EXPIRED_TEXT = "Permission request expired after 2 seconds. User can retry the operation."


async def pending(world: WorldFactory, **options: object) -> tuple[World, str]:
    """A world whose first session has request r1 pending; returns (world, session id)."""
    w = await world({"turns": [[permission("Bash", ECHO, "r1")]]}, **options)
    session = await w.new_session()
    await session.send_user_message(None, "say hi")
    await w.until("r1 pending", lambda: w.row("r1") and w.bridge.has_pending(session.id))
    return w, session.id


async def test_a_request_past_its_ttl_gets_the_soft_deny_and_clients_are_told(
    world: WorldFactory,
) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(ttl_seconds=2))
    assert await w.bridge.sweep_once() == SweepReport(reminded=0, expired=0)
    w.clock.advance(2.5)
    assert await w.bridge.sweep_once() == SweepReport(reminded=0, expired=1)
    [written] = await w.until("the soft deny", lambda: w.answers_to(session_id, "r1"))
    assert written["response"] == {"behavior": "deny", "message": EXPIRED_TEXT}
    assert await w.until("claude saw it", lambda: w.tool_results(session_id)) == [EXPIRED_TEXT]
    row = w.stored("r1")
    assert (row.response_decision, row.delivered) == ("expired", True)
    [resolved] = await w.until("resolved", lambda: w.events(session_id, "permission_resolved"))
    assert (resolved.permission_resolved.outcome, resolved.permission_resolved.message) == (
        "expired",
        EXPIRED_TEXT,
    )
    assert w.bridge.metrics.snapshot()["timeout"] == 1
    assert await w.bridge.sweep_once() == SweepReport(reminded=0, expired=0)
    session = await w.manager.get(session_id)
    late = await w.bridge.answer(
        session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE)
    )
    assert (late.duplicate, late.outcome) == (True, "expired")


async def test_an_answer_after_the_expiry_but_before_the_sweep_is_stale(
    world: WorldFactory,
) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(ttl_seconds=2))
    w.clock.advance(3)
    session = await w.manager.get(session_id)
    with pytest.raises(AnswerError) as raised:
        await w.bridge.answer(session, ClientAnswer("r1", Decision.PERMISSION_DECISION_ALLOW_ONCE))
    assert raised.value.code == "PERMISSION_STALE"
    await w.bridge.sweep_once()
    assert w.stored("r1").response_decision == "expired"


async def test_the_default_ttl_is_seven_days(world: WorldFactory) -> None:
    w, session_id = await pending(world)
    w.clock.advance(7 * DAY - 60)
    assert (await w.bridge.sweep_once()).expired == 0
    w.clock.advance(120)
    assert (await w.bridge.sweep_once()).expired == 1
    [written] = await w.until("the soft deny", lambda: w.answers_to(session_id, "r1"))
    assert written["response"]["message"].startswith("Permission request expired after 7 days.")


async def test_reminders_fire_at_one_hour_and_one_day_once_each(
    world: WorldFactory, caplog: pytest.LogCaptureFixture
) -> None:
    w, session_id = await pending(world)
    assert (await w.bridge.sweep_once()).reminded == 0
    w.clock.advance(HOUR + 1)
    with caplog.at_level(logging.WARNING):
        assert (await w.bridge.sweep_once()).reminded == 1
    assert any("r1" in r.getMessage() and "reminder" in r.getMessage() for r in caplog.records)
    assert (await w.bridge.sweep_once()).reminded == 0
    [first] = await w.until("a reminder", lambda: w.events(session_id, "permission_reminder"))
    assert first.permission_reminder.request_id == "r1"
    assert first.permission_reminder.tool_name == "Bash"
    assert first.permission_reminder.waiting_seconds >= HOUR
    w.clock.advance(DAY)
    assert (await w.bridge.sweep_once()).reminded == 1
    assert (await w.bridge.sweep_once()).reminded == 0
    reminders = await w.until("two", lambda: w.events(session_id, "permission_reminder")[1:])
    assert reminders[0].permission_reminder.waiting_seconds >= DAY
    row = w.stored("r1")
    assert (row.reminder_1h_sent, row.reminder_24h_sent, row.response_received) == (
        True,
        True,
        False,
    )


async def test_a_request_overdue_for_both_reminders_gets_only_the_later_one(
    world: WorldFactory,
) -> None:
    w, session_id = await pending(world)
    w.clock.advance(DAY + 1)
    assert (await w.bridge.sweep_once()).reminded == 1
    assert (await w.bridge.sweep_once()).reminded == 0
    [reminder] = await w.until("a reminder", lambda: w.events(session_id, "permission_reminder"))
    assert reminder.permission_reminder.waiting_seconds >= DAY


async def test_configured_reminder_times_are_used(world: WorldFactory) -> None:
    w, _ = await pending(world, settings=PermissionSettings(reminder_seconds=(120.0, 600.0)))
    w.clock.advance(119)
    assert (await w.bridge.sweep_once()).reminded == 0
    w.clock.advance(2)
    assert (await w.bridge.sweep_once()).reminded == 1
    w.clock.advance(480)
    assert (await w.bridge.sweep_once()).reminded == 1


async def test_the_notify_command_runs_with_the_request_in_its_environment(
    world: WorldFactory, tmp_path: Path
) -> None:
    out = tmp_path / "notified.jsonl"
    script = (
        "import json, os, sys\n"
        "seen = {k: v for k, v in os.environ.items() if k.startswith('BETCODE_PERMISSION_')}\n"
        "open(sys.argv[1], 'a').write(json.dumps(seen) + '\\n')\n"
    )
    w, session_id = await pending(world, notify=[sys.executable, "-c", script, str(out)])
    w.clock.advance(HOUR + 5)
    await w.bridge.sweep_once()
    text = await w.until("the command ran", lambda: out.exists() and out.read_text())
    [seen] = [json.loads(line) for line in text.splitlines()]
    assert seen["BETCODE_PERMISSION_REQUEST_ID"] == "r1"
    assert seen["BETCODE_PERMISSION_SESSION_ID"] == session_id
    assert seen["BETCODE_PERMISSION_TOOL"] == "Bash"
    assert json.loads(seen["BETCODE_PERMISSION_INPUT"]) == ECHO
    assert int(seen["BETCODE_PERMISSION_WAITING_SECONDS"]) >= HOUR
    assert int(seen["BETCODE_PERMISSION_EXPIRES_AT"]) == int(w.stored("r1").expires_at)
    assert "r1" in seen["BETCODE_PERMISSION_SUMMARY"]


async def test_a_failing_notify_command_is_logged_and_nothing_else_changes(
    world: WorldFactory, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-notifier")
    w, session_id = await pending(world, notify=[missing])
    w.clock.advance(HOUR + 5)
    with caplog.at_level(logging.ERROR):
        assert (await w.bridge.sweep_once()).reminded == 1
        await w.bridge.close()
    assert any(missing in r.getMessage() for r in caplog.records)
    await w.until("the reminder event", lambda: w.events(session_id, "permission_reminder"))
    assert w.stored("r1").response_received is False


async def test_client_activity_pushes_the_expiry_back_by_one_ttl(world: WorldFactory) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(ttl_seconds=HOUR))
    session = await w.manager.get(session_id)
    w.clock.advance(HOUR - 60)
    await w.bridge.on_session_activity(session)
    row = w.stored("r1")
    assert row.extension_count == 1
    assert row.expires_at >= w.clock() + HOUR - 1
    w.clock.advance(120)  # past the first expiry, not the extended one
    assert (await w.bridge.sweep_once()).expired == 0
    await session.send_user_message(None, "still there?")  # a user message is activity too
    assert w.stored("r1").extension_count == 2
    w.clock.advance(HOUR + 1)
    assert (await w.bridge.sweep_once()).expired == 1


async def test_attaching_is_activity_and_extension_can_be_turned_off(world: WorldFactory) -> None:
    w, session_id = await pending(world)
    session = await w.manager.get(session_id)
    await w.bridge.replay_frames(session, 0)
    assert w.stored("r1").extension_count == 1
    w2, session2_id = await pending(world, settings=PermissionSettings(extend_on_activity=False))
    session2 = await w2.manager.get(session2_id)
    await w2.bridge.on_session_activity(session2)
    await w2.bridge.replay_frames(session2, 0)
    assert w2.stored("r1").extension_count == 0


async def test_the_sweep_task_expires_requests_on_its_own(world: WorldFactory) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(ttl_seconds=2))
    sweeper = asyncio.create_task(w.bridge.run_sweeper(0.05))
    try:
        w.clock.advance(3)
        await w.until("expired by the task", lambda: w.answers_to(session_id, "r1"))
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    assert w.stored("r1").response_decision == "expired"


async def test_expiry_of_a_request_whose_process_is_gone_writes_nothing_to_claude(
    world: WorldFactory,
) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(ttl_seconds=2))
    await w.restart()  # nothing is live after a daemon restart
    w.clock.advance(3)
    assert (await w.bridge.sweep_once()).expired == 1
    row = w.stored("r1")
    assert (row.response_decision, row.delivered) == ("expired", True)
    assert w.answers_to(session_id, "r1") == []
    assert w.bridge.metrics.snapshot()["timeout"] == 1


async def test_reloaded_settings_apply_to_the_next_sweep(world: WorldFactory) -> None:
    w, session_id = await pending(world, settings=PermissionSettings(reminder_seconds=(HOUR,)))
    w.clock.advance(61)
    assert (await w.bridge.sweep_once()).reminded == 0
    w.bridge.apply_settings(PermissionSettings(ttl_seconds=90, reminder_seconds=(60,)))
    assert (await w.bridge.sweep_once()).reminded == 1
    w.clock.advance(DAY)  # past the TTL stored with the request at first: 7 days still
    assert (await w.bridge.sweep_once()).expired == 0
    w.clock.advance(7 * DAY)
    assert (await w.bridge.sweep_once()).expired == 1
    [written] = await w.until("the soft deny", lambda: w.answers_to(session_id, "r1"))
    # The expiry text names the TTL in force now.
    assert written["response"]["message"].startswith("Permission request expired after 90 seconds")
