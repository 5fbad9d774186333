"""Real CLI through the daemon: subagents and orchestration plans over SubagentService."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.storage import subagents as rows
from betcode.subagents.orchestrations import Orchestrations
from betcode.subagents.orchestrator import Orchestration
from betcode.subagents.plan import StepSpec, Strategy
from betcode.v1 import agent_pb2, subagent_pb2, subagent_pb2_grpc
from betcode.worktrees import RepoChanges

pytestmark = pytest.mark.real_cli


@pytest.fixture
async def stub(daemon: InProcessDaemon) -> AsyncIterator[subagent_pb2_grpc.SubagentServiceStub]:
    channel = grpc.aio.insecure_channel(f"unix:{daemon.socket}")
    yield subagent_pb2_grpc.SubagentServiceStub(channel)
    await channel.close()


async def parent_session(clients: Callable[[str], Client], workspace: Workspace) -> Client:
    parent = clients("parent")
    parent.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await parent.wait_for("session_info")
    return parent


def plain(text: str) -> str:
    return f"SCN:plain {json.dumps({'text': text})} answer"


async def watch_plan(
    stub: subagent_pb2_grpc.SubagentServiceStub, orchestration_id: str
) -> list[subagent_pb2.OrchestrationEvent]:
    request = subagent_pb2.WatchOrchestrationRequest(orchestration_id=orchestration_id)
    return [event async for event in stub.WatchOrchestration(request, timeout=120)]


async def test_a_subagent_runs_its_prompt_in_a_session_of_its_own_and_reports_its_result(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id, prompt=plain("sub-result-42"), name="helper"
        )
    )
    watch = subagent_pb2.WatchSubagentRequest(subagent_id=spawned.subagent_id)
    events = [event async for event in stub.WatchSubagent(watch, timeout=60)]

    kinds = [event.WhichOneof("event") for event in events]
    assert kinds[0] == "started"
    assert kinds[-1] == "completed"
    assert events[-1].completed.result_summary == "sub-result-42"
    assert "".join(e.output.text for e in events if e.HasField("output")) == "sub-result-42"
    listed = await stub.ListSubagents(
        subagent_pb2.ListSubagentsRequest(parent_session_id=parent.session_id)
    )
    [info] = listed.subagents
    assert info.status == subagent_pb2.SUBAGENT_STATUS_COMPLETED
    assert info.session_id == spawned.session_id != parent.session_id
    assert info.max_turns == 50  # daemon.subagent.default_max_turns
    # Its history replays like any session's: the prompt and the answer are in its log.
    observer = clients("observer")
    observer.resume(spawned.session_id)
    await observer.wait_for("turn_complete")
    assert observer.of_kind("user_input")[0].user_input.content == plain("sub-result-42")
    # Watching again from a sequence resumes after it: only the end is left.
    last = max(e.sequence for e in events)
    again = subagent_pb2.WatchSubagentRequest(subagent_id=spawned.subagent_id, from_sequence=last)
    tail = [event.WhichOneof("event") async for event in stub.WatchSubagent(again, timeout=30)]
    assert tail == ["started", "completed"]


async def test_a_dag_passes_both_summaries_on_and_a_failure_blocks_only_its_dependants(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    mock_api: MockAnthropic,
) -> None:
    parent = await parent_session(clients, workspace)
    (workspace.repo / "notes.txt").write_text("a file to read\n")
    fails = 'SCN:tool_read {"file_path": "notes.txt"} read it'
    step = subagent_pb2.OrchestrationStep
    plan = subagent_pb2.CreateOrchestrationRequest(
        parent_session_id=parent.session_id,
        strategy=subagent_pb2.ORCHESTRATION_STRATEGY_DAG,
        steps=[
            step(id="left", prompt=plain("left-summary-1")),
            step(id="right", prompt=plain("right-summary-2")),
            step(id="join", prompt=plain("joined"), depends_on=["left", "right"]),
            # One model call ends in a tool use, so claude stops at --max-turns 1: an error.
            step(id="broken", prompt=fails, max_turns=1),
            step(id="after-broken", prompt=plain("blocked-step-never-runs"), depends_on=["broken"]),
        ],
    )
    created = await stub.CreateOrchestration(plan)
    assert created.total_steps == 5
    events = await watch_plan(stub, created.orchestration_id)

    completed = {
        e.step_completed.step_id: e.step_completed for e in events if e.HasField("step_completed")
    }
    assert set(completed) == {"left", "right", "join"}
    assert completed["left"].result_summary == "left-summary-1"
    [failed] = [e.step_failed for e in events if e.HasField("step_failed")]
    assert failed.step_id == "broken"
    assert list(failed.blocked_steps) == ["after-broken"]
    assert events[-1].HasField("failed")
    assert events[-1].failed.completed_steps == 3
    # The join step's prompt carried both summaries ahead of its own text.
    sent = next(
        json.dumps(r.body["messages"])
        for r in mock_api.message_requests
        if "joined" in json.dumps(r.body["messages"])
    )
    assert "left-summary-1" in sent
    assert "right-summary-2" in sent
    assert not any(
        "blocked-step-never-runs" in json.dumps(r.body["messages"])
        for r in mock_api.message_requests
    )


async def test_bad_plans_and_requests_are_refused_before_anything_starts(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    step = subagent_pb2.OrchestrationStep
    cases = [
        (
            subagent_pb2.CreateOrchestrationRequest(
                parent_session_id=parent.session_id,
                steps=[
                    step(id="a", prompt="x", depends_on=["b"]),
                    step(id="b", prompt="y", depends_on=["a"]),
                ],
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "DAG_CYCLE",
        ),
        (
            subagent_pb2.CreateOrchestrationRequest(
                parent_session_id=parent.session_id, steps=[step(id="a", prompt="x", worktree=True)]
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            "WORKTREE_UNAVAILABLE",
        ),
    ]
    for request, status, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateOrchestration(request)
        assert refused.value.code() == status
        assert dict(refused.value.trailing_metadata())["betcode-error-code"] == code
    spawns = [
        (dict(auto_approve=True), "INVALID_PERMISSION_CONFIG"),
        (dict(env={"ANTHROPIC_BASE_URL": "http://x"}), "INVALID_REQUEST"),
    ]
    for fields, code in spawns:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.SpawnSubagent(
                subagent_pb2.SpawnSubagentRequest(
                    parent_session_id=parent.session_id, prompt="x", **fields
                )  # type: ignore[arg-type]
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(refused.value.trailing_metadata())["betcode-error-code"] == code
    listed = await stub.ListSubagents(
        subagent_pb2.ListSubagentsRequest(parent_session_id=parent.session_id)
    )
    assert list(listed.subagents) == []


async def test_parallel_steps_asking_for_worktrees_each_run_in_a_checkout_of_their_own(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    assert daemon.daemon.worktrees is not None
    await daemon.daemon.worktrees.repos.register(str(workspace.repo), RepoChanges())
    step = subagent_pb2.OrchestrationStep
    created = await stub.CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(
            parent_session_id=parent.session_id,
            strategy=subagent_pb2.ORCHESTRATION_STRATEGY_PARALLEL,
            steps=[
                step(id="one", prompt=plain("one"), worktree=True),
                step(id="two", prompt=plain("two"), worktree=True),
            ],
        )
    )
    events = await watch_plan(stub, created.orchestration_id)

    assert events[-1].HasField("completed")
    listed = await stub.ListSubagents(
        subagent_pb2.ListSubagentsRequest(parent_session_id=parent.session_id)
    )
    places = {info.step_id: Path(info.working_directory) for info in listed.subagents}
    assert len(set(places.values())) == 2
    for place in places.values():
        assert place != workspace.repo
        assert (place / ".git").is_file()  # a linked git worktree


async def test_an_interrupted_plan_is_watched_live_from_its_load_on_not_from_its_rows(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    """At startup the daemon registers the plans a restart interrupted before it serves and
    starts them after: a WatchOrchestration in between follows the plan to its end (from the
    stored rows alone it would end at once, mid-plan). Here the plan's only step had completed
    and the daemon died before the plan's end was stored."""
    parent = await parent_session(clients, workspace)
    core, subagents = daemon.daemon.core, daemon.daemon.subagents
    assert core is not None
    assert subagents is not None
    writer, reader, manager = core.writer, core.reader, subagents.manager
    step = StepSpec(id="only", prompt=plain("unused"))
    stored = await Orchestration.create(
        parent.session_id, [step], Strategy.SEQUENTIAL, manager, writer
    )
    await writer.call(
        lambda c: rows.set_step(c, stored.id, "only", "completed", 0.0, result_summary="done")
    )

    restarted = Orchestrations(manager, writer, reader)
    assert await restarted.load_interrupted() == 1
    watching = asyncio.create_task(collect(restarted.watch(stored.id)))
    await asyncio.sleep(0)  # the watcher is in before the plan goes on
    restarted.resume_loaded()
    events = await asyncio.wait_for(watching, 30)

    assert [e.WhichOneof("event") for e in events] == ["completed"]
    assert events[-1].completed.succeeded == 1
    assert await reader.read(rows.unfinished_orchestrations) == []


async def collect(
    stream: AsyncIterator[subagent_pb2.OrchestrationEvent],
) -> list[subagent_pb2.OrchestrationEvent]:
    return [event async for event in stream]
