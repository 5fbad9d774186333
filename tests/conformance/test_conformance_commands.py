"""CommandService as the upstream Rust CLI calls it, over TCP and over the Unix socket: it never
sends a session_id (its ListPathRequest and ListAgentsRequest are `query, max_results: 8`, its
GetCommandRegistryRequest is empty, its ExecuteServiceCommandRequest is `command, args`). The
daemon answers in its current directory: the most recently active session's, or where `cd`
moved it inside a session's tree; nothing outside the sessions' trees is reachable."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import grpc
import grpc.aio
import pytest
from stub_calls import Served, collect, headers_of, read_until, start_request

from betcode.v1 import agent_pb2_grpc, commands_pb2, commands_pb2_grpc

pytestmark = pytest.mark.real_cli
pb = commands_pb2
Code = grpc.StatusCode
CLI_MAX_RESULTS = 8  # what the upstream TUI asks for


def project_tree(project: Path, outside: Path) -> None:
    (project / ".claude" / "commands").mkdir(parents=True)
    (project / ".claude" / "commands" / "ship.md").write_text("---\ndescription: Ship it\n---\n")
    (project / ".claude" / "agents").mkdir()
    (project / ".claude" / "agents" / "reviewer.md").write_text("---\nname: code-reviewer\n---\n")
    (project / "src" / "app").mkdir(parents=True)
    for name in ("main.py", "models.py", "views.py"):
        (project / "src" / "app" / name).write_text("x\n")
    (project / "build").mkdir()
    (project / "build" / "out.bin").write_text("x")
    (project / ".gitignore").write_text("build/\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, capture_output=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (project / "escape").symlink_to(outside)


async def start_session_as_the_cli_does(channel: grpc.aio.Channel, directory: Path) -> str:
    """A new session with the id the client chose, in `directory` (it outlives the stream)."""
    session_id = str(uuid.uuid4())
    call = agent_pb2_grpc.AgentServiceStub(channel).Converse()
    await headers_of(call)
    await call.write(start_request(session_id=session_id, working_directory=str(directory)))
    await read_until(call, "session_info")
    call.cancel()
    return session_id


async def paths(stub: commands_pb2_grpc.CommandServiceStub, query: str) -> list[str]:
    request = pb.ListPathRequest(query=query, max_results=CLI_MAX_RESULTS)
    return [entry.path for entry in (await stub.ListPath(request)).entries]


async def service_command(
    stub: commands_pb2_grpc.CommandServiceStub, command: str, *args: str
) -> list[str]:
    """The stdout lines of a command that must end with exit code 0."""
    outputs = await collect(
        stub.ExecuteServiceCommand(pb.ExecuteServiceCommandRequest(command=command, args=args))
    )
    assert outputs[-1].WhichOneof("output") == "exit_code"
    assert outputs[-1].exit_code == 0
    return [output.stdout_line for output in outputs[:-1]]


async def refusal(
    stub: commands_pb2_grpc.CommandServiceStub, command: str, *args: str
) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await service_command(stub, command, *args)
    return refused.value.code()


async def test_before_any_session_the_registry_answers_and_paths_say_why_not(
    channel: grpc.aio.Channel,
) -> None:
    stub = commands_pb2_grpc.CommandServiceStub(channel)
    registry = await stub.GetCommandRegistry(pb.GetCommandRegistryRequest())
    assert {"pwd", "reload-remote"} <= {entry.name for entry in registry.commands}
    assert (await stub.ListAgents(pb.ListAgentsRequest(max_results=CLI_MAX_RESULTS))).agents == []
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await paths(stub, "src")
    assert refused.value.code() == Code.FAILED_PRECONDITION
    assert "start a session" in (refused.value.details() or "")
    assert await refusal(stub, "pwd") == Code.FAILED_PRECONDITION


async def test_completion_and_the_palette_work_in_the_session_directory(
    channel: grpc.aio.Channel, served: Served, tmp_path: Path
) -> None:
    project = served.project.resolve()
    project_tree(project, tmp_path / "outside")
    await start_session_as_the_cli_does(channel, project)
    stub = commands_pb2_grpc.CommandServiceStub(channel)

    registry = await stub.GetCommandRegistry(pb.GetCommandRegistryRequest())
    ship = {entry.name: entry for entry in registry.commands}["ship"]
    assert (ship.source, ship.description) == ("project", "Ship it")
    agents = await stub.ListAgents(pb.ListAgentsRequest(query="rev", max_results=CLI_MAX_RESULTS))
    assert [(agent.name, agent.source) for agent in agents.agents] == [("code-reviewer", "project")]

    assert await paths(stub, "src/app/") == [
        "src/app/main.py",
        "src/app/models.py",
        "src/app/views.py",
    ]
    assert await paths(stub, "bui") == []  # .gitignore respected
    limited = await stub.ListPath(pb.ListPathRequest(query="", max_results=2))
    assert len(limited.entries) == 2
    for query in ("../outside/secret.txt", "/etc/passwd", "~/x", "src/../../x", "escape/sec"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await paths(stub, query)
        assert refused.value.code() == Code.INVALID_ARGUMENT, query

    assert await service_command(stub, "pwd") == [str(project)]
    assert (await service_command(stub, "reload-remote"))[0].startswith("Reloaded ")


async def test_cd_moves_the_current_directory_within_the_session_tree_only(
    channel: grpc.aio.Channel, served: Served, tmp_path: Path
) -> None:
    project = served.project.resolve()
    project_tree(project, tmp_path / "outside")
    await start_session_as_the_cli_does(channel, project)
    stub = commands_pb2_grpc.CommandServiceStub(channel)

    assert await service_command(stub, "cd", "src") == [str(project / "src")]
    assert await service_command(stub, "pwd") == [str(project / "src")]
    assert await paths(stub, "app/ma") == ["app/main.py"]  # relative to the new directory
    assert await service_command(stub, "cd", "..") == [str(project)]

    for outside in ("..", "escape", str(tmp_path / "outside"), "/", "/etc"):
        assert await refusal(stub, "cd", outside) == Code.PERMISSION_DENIED, outside
    assert await refusal(stub, "cd", "README.md") == Code.INVALID_ARGUMENT
    assert await refusal(stub, "cd", "src", "app") == Code.INVALID_ARGUMENT
    assert await service_command(stub, "pwd") == [str(project)]  # unchanged by the refusals

    await service_command(stub, "cd", "src/app")
    # A newer session elsewhere: the pinned directory stays until `cd ~` (the CLI's bare /cd).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    await start_session_as_the_cli_does(channel, elsewhere)
    assert await service_command(stub, "pwd") == [str(project / "src" / "app")]
    assert await service_command(stub, "cd", "~") == [str(elsewhere.resolve())]

    # With a session_id, a session's directory is fixed.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await collect(
            stub.ExecuteServiceCommand(
                pb.ExecuteServiceCommandRequest(command="cd", args=["src"], session_id="x")
            )
        )
    assert refused.value.code() == Code.FAILED_PRECONDITION
