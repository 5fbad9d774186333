"""CommandService on a real daemon over its Unix socket, for a session in a real git project
with `.claude/commands`, `.claude/agents`, the user's own commands and a `.gitignore`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil
import pytest
from harness.conditions import until
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace

from betcode.v1 import agent_pb2, commands_pb2, commands_pb2_grpc

pb = commands_pb2

REVIEW = (
    '---\ndescription: "Review the open pull request"\nargument-hint: "[PR number]"\n---\n'
    "Review $ARGUMENTS\n"
)
COMPONENT = "# Scaffold a UI component\nMake a component named $ARGUMENTS.\n"
REVIEWER = "---\nname: code-reviewer\ndescription: Reviews diffs\n---\nYou review code.\n"


def project_files(workspace: Workspace) -> None:
    commands = workspace.repo / ".claude" / "commands"
    (commands / "frontend").mkdir(parents=True)
    (commands / "review-pr.md").write_text(REVIEW)
    (commands / "frontend" / "component.md").write_text(COMPONENT)
    (workspace.repo / ".claude" / "agents").mkdir()
    (workspace.repo / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    user = workspace.home / ".claude"
    (user / "commands").mkdir(parents=True)
    (user / "commands" / "standup.md").write_text("---\ndescription: Write my standup\n---\n")
    (user / "agents").mkdir()
    (user / "agents" / "helper.md").write_text("---\ndescription: Helps\n---\n")


async def open_session(clients: Callable[[str], Client], directory: Path) -> Client:
    client = clients("palette")
    client.converse(agent_pb2.StartConversation(working_directory=str(directory)))
    await client.wait_for("session_info")
    return client


def commands_stub(client: Client) -> commands_pb2_grpc.CommandServiceStub:
    return commands_pb2_grpc.CommandServiceStub(client.channel)


async def registry(client: Client, session_id: str | None = None) -> dict[str, pb.CommandEntry]:
    request = pb.GetCommandRegistryRequest(
        session_id=client.session_id if session_id is None else session_id
    )
    response = await commands_stub(client).GetCommandRegistry(request)
    return {entry.name: entry for entry in response.commands}


@pytest.mark.real_cli
async def test_registry_and_agents_from_builtins_project_user_and_claude(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    project_files(workspace)
    client = await open_session(clients, workspace.repo)
    before = await registry(client)
    assert before["compact"].source == "betcode"
    assert before["compact"].execution_mode == pb.EXECUTION_MODE_LOCAL
    assert before["model"].args_schema == "NAME"
    review = before["review-pr"]
    assert (review.description, review.args_schema, review.source) == (
        "Review the open pull request",
        "[PR number]",
        "project",
    )
    assert review.category == pb.COMMAND_CATEGORY_CLAUDE_CODE
    assert review.execution_mode == pb.EXECUTION_MODE_PASSTHROUGH
    assert before["frontend:component"].description == "Scaffold a UI component"
    assert before["standup"].source == "user"
    assert "context" not in before  # claude has not run in this session yet

    client.say("hello")
    await client.wait_for("turn_complete")
    after = await registry(client)
    # claude's own, from the system/init it sent: names, and a description where one is known.
    assert after["context"].source == "claude-code"
    assert after["context"].description
    assert after["review-pr"].source == "project"  # the file's entry wins over claude's name
    # Without a session: the same, for the daemon's current directory (this session's).
    sessionless = await registry(client, session_id="")
    assert sessionless == after
    # A session the daemon does not know yet (a client asks before starting it): the same.
    assert await registry(client, session_id=str(uuid.uuid4())) == after

    agents = await commands_stub(client).ListAgents(
        pb.ListAgentsRequest(session_id=client.session_id)
    )
    sources = {agent.name: agent.source for agent in agents.agents}
    assert sources["code-reviewer"] == "project"
    assert sources["helper"] == "user"
    assert sources["general-purpose"] == "claude-code"
    found = await commands_stub(client).ListAgents(
        pb.ListAgentsRequest(session_id=client.session_id, query="REVIEW", max_results=5)
    )
    assert [agent.name for agent in found.agents] == ["code-reviewer"]

    # Edited, added and removed files show at the next call.
    commands = workspace.repo / ".claude" / "commands"
    (commands / "review-pr.md").write_text("---\ndescription: Review it again\n---\n")
    (commands / "ship.md").write_text("Ship the release\n")
    (commands / "frontend" / "component.md").unlink()
    changed = await registry(client)
    assert changed["review-pr"].description == "Review it again"
    assert changed["ship"].description == "Ship the release"
    # The file is gone; only claude's name for it is left until its next turn's init.
    assert changed["frontend:component"].source == "claude-code"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


async def list_path(client: Client, query: str, limit: int = 0) -> list[str]:
    request = pb.ListPathRequest(session_id=client.session_id, query=query, max_results=limit)
    response = await commands_stub(client).ListPath(request)
    return [entry.path for entry in response.entries]


async def refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_path_completion_respects_gitignore_and_stays_in_the_tree(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    repo = workspace.repo
    (repo / "src" / "app").mkdir(parents=True)
    (repo / "src" / "app" / "main.py").write_text("print()\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("x")
    (repo / "server.log").write_text("x")
    (repo / ".gitignore").write_text("build/\n*.log\n")
    git(repo, "add", "src/app/main.py", ".gitignore")
    (repo / "src" / "app" / "untracked.py").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (repo / "escape").symlink_to(outside)
    client = await open_session(clients, repo)
    stub = commands_stub(client)

    assert await list_path(client, "src/app/") == ["src/app/main.py", "src/app/untracked.py"]
    everything = await list_path(client, "", 1000)
    assert "README.md" in everything
    assert "escape" in everything
    assert not any(path.startswith(("build", "server.log", "escape/")) for path in everything)
    assert await list_path(client, "untr") == ["src/app/untracked.py"]
    assert len(await list_path(client, "", 2)) == 2
    response = await stub.ListPath(pb.ListPathRequest(session_id=client.session_id, query="src"))
    kinds = {entry.path: entry for entry in response.entries}
    assert kinds["src"].kind == pb.PATH_KIND_DIRECTORY
    assert kinds["src/app/main.py"].kind == pb.PATH_KIND_FILE
    assert kinds["src/app/main.py"].size == len("print()\n")
    link = await stub.ListPath(pb.ListPathRequest(session_id=client.session_id, query="esc"))
    assert [(e.path, e.kind) for e in link.entries] == [("escape", pb.PATH_KIND_SYMLINK)]

    # A file created now shows up once the index notices the change (checked every second).
    (repo / "src" / "app" / "fresh.py").write_text("x")
    async with asyncio.timeout(20):
        while "src/app/fresh.py" not in await list_path(client, "src/app/"):  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # polled over gRPC: no event to wait on

    for query in ("../outside/secret.txt", "/etc/passwd", "~/x", "src/../../x", "escape/sec"):
        error = await refused(
            stub.ListPath(pb.ListPathRequest(session_id=client.session_id, query=query))
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, query
    # Without a session_id: below the daemon's current directory, this only session's.
    sessionless = await stub.ListPath(pb.ListPathRequest(query="src/app/"))
    assert [e.path for e in sessionless.entries] == await list_path(client, "src/app/")
    error = await refused(stub.ListPath(pb.ListPathRequest(session_id="no-such-session")))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def run_command(client: Client, command: str, *args: str) -> list[pb.ServiceCommandOutput]:
    request = pb.ExecuteServiceCommandRequest(
        command=command, args=args, session_id=client.session_id
    )
    return [output async for output in commands_stub(client).ExecuteServiceCommand(request)]


async def test_service_commands_and_plugins(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    client = await open_session(clients, workspace.repo)
    pwd = await run_command(client, "pwd")
    assert [out.stdout_line for out in pwd[:-1]] == [str(workspace.repo.resolve())]
    assert pwd[-1].WhichOneof("output") == "exit_code"
    assert pwd[-1].exit_code == 0
    reload = await run_command(client, "reload-remote")
    assert reload[0].stdout_line.startswith("Reloaded ")
    for command in ("bash", "cd", "exit-daemon"):
        error = await refused(run_command(client, command, "ls"))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, command
    assert "permission gate" in ((await refused(run_command(client, "bash", "ls"))).details() or "")
    error = await refused(run_command(client, "frobnicate"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    stub = commands_stub(client)
    assert list((await stub.ListPlugins(pb.ListPluginsRequest())).plugins) == []
    error = await refused(stub.AddPlugin(pb.AddPluginRequest(name="x", socket_path="/tmp/x")))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "does not support plugins" in (error.details() or "")


@pytest.mark.real_cli
async def test_a_model_switch_survives_a_claude_restart(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    """The chat's `/model NAME` is claude's own command, which switches claude's process only;
    the session keeps the model claude reports, so a claude replacing a crashed one runs it."""
    client = await open_session(clients, workspace.repo)
    client.say("/model sonnet")
    await client.wait_for("turn_complete")
    client.say("hello")
    await client.wait_for("turn_complete", 2)
    assert client.of_kind("session_info")[-1].session_info.model == "claude-sonnet-5-5"
    assert daemon.daemon.sessions is not None
    [session] = daemon.daemon.sessions.live
    old_pid = session.supervisor.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    await until(lambda: session.supervisor.pid not in (None, old_pid))
    assert session.supervisor.pid is not None
    argv = psutil.Process(session.supervisor.pid).cmdline()
    assert argv[argv.index("--model") + 1] == "claude-sonnet-5-5"
    listed = await client.stub.ListSessions(agent_pb2.ListSessionsRequest())
    assert [summary.model for summary in listed.sessions] == ["claude-sonnet-5-5"]
