"""betcode.v1.CommandService: thin — find the session's directory, ask the catalog, convert.

Service commands run in the daemon for a session: `pwd` and `reload-remote`. `cd`, `bash` and
`exit-daemon` (named by the upstream daemon) are refused with FAILED_PRECONDITION and the
reason: a session's directory is fixed, a shell run here would bypass the permission gate, and
the daemon stops with `betcode daemon stop`. Plugins are not supported: the list is empty and
the other plugin methods answer UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc

from betcode.commands.catalog import CommandCatalog
from betcode.commands.path_index import PathDetails
from betcode.commands.path_query import PathQueryError, clamp_results
from betcode.commands.registry import (
    SERVICE_COMMANDS,
    AgentSpec,
    Category,
    CommandSpec,
    Mode,
    filter_agents,
)
from betcode.server.errors import BetCodeError, ErrorCode, translates_errors
from betcode.server.validation import check_id, check_text, domain_error, invalid
from betcode.sessions.manager import SessionManager
from betcode.v1 import commands_pb2 as pb

CATEGORY = {
    Category.SERVICE: pb.COMMAND_CATEGORY_SERVICE,
    Category.CLAUDE_CODE: pb.COMMAND_CATEGORY_CLAUDE_CODE,
}
MODE = {Mode.LOCAL: pb.EXECUTION_MODE_LOCAL, Mode.PASSTHROUGH: pb.EXECUTION_MODE_PASSTHROUGH}
PATH_KIND = {
    "file": pb.PATH_KIND_FILE,
    "directory": pb.PATH_KIND_DIRECTORY,
    "symlink": pb.PATH_KIND_SYMLINK,
}
SERVICE_COMMAND_NAMES = frozenset(spec.name for spec in SERVICE_COMMANDS)
REFUSED_COMMANDS = {
    "cd": "a session's working directory is fixed; start a session in the other directory",
    "bash": "a shell run by the daemon would bypass the permission gate; ask claude, whose "
    "Bash tool goes through the permission rules",
    "exit-daemon": "stop the daemon with `betcode daemon stop` on its machine",
}


def _commands_error(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, PathQueryError):
        return invalid(str(exc))
    return domain_error(exc)


serves = translates_errors(_commands_error)


def command_entry(spec: CommandSpec) -> pb.CommandEntry:
    entry = pb.CommandEntry(
        name=spec.name,
        description=spec.description,
        category=CATEGORY[spec.category],
        execution_mode=MODE[spec.mode],
        source=spec.source.value,
    )
    if spec.args_hint is not None:
        entry.args_schema = spec.args_hint
    return entry


def agent_info(agent: AgentSpec) -> pb.AgentInfo:
    return pb.AgentInfo(
        name=agent.name,
        kind=pb.AGENT_KIND_CLAUDE_INTERNAL,
        status=pb.COMMAND_AGENT_STATUS_IDLE,
        source=agent.source.value,
    )


def path_entry(found: PathDetails) -> pb.PathEntry:
    return pb.PathEntry(
        path=found.path, kind=PATH_KIND[found.kind], size=found.size, modified_at=found.modified_at
    )


def _line(text: str) -> pb.ServiceCommandOutput:
    return pb.ServiceCommandOutput(stdout_line=text)


# A session's working directory by its id (raises SessionNotFound).
DirectoryLookup = Callable[[str], Awaitable[str]]


def session_directories(sessions: SessionManager) -> DirectoryLookup:
    async def directory_of(session_id: str) -> str:
        return (await sessions.record(session_id)).working_directory

    return directory_of


class CommandService:
    def __init__(self, directory_of: DirectoryLookup, catalog: CommandCatalog) -> None:
        self._directory_of = directory_of
        self._catalog = catalog

    async def _directory(self, session_id: str) -> Path:
        """The session's working directory, resolved (SessionNotFound for an unknown id)."""
        directory = await self._directory_of(check_id(session_id, "session_id"))
        return await asyncio.to_thread(Path(directory).resolve)

    async def _directory_if_any(self, session_id: str) -> Path | None:
        return await self._directory(session_id) if session_id else None

    @serves
    async def GetCommandRegistry(
        self, request: pb.GetCommandRegistryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCommandRegistryResponse:
        project = await self._directory_if_any(request.session_id)
        specs = await self._catalog.commands(project, request.session_id or None)
        return pb.GetCommandRegistryResponse(commands=[command_entry(spec) for spec in specs])

    @serves
    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        project = await self._directory_if_any(request.session_id)
        agents = await self._catalog.agents(project, request.session_id or None)
        chosen = filter_agents(
            agents, check_text(request.query, "query"), clamp_results(request.max_results)
        )
        return pb.ListAgentsResponse(agents=[agent_info(agent) for agent in chosen])

    @serves
    async def ListPath(
        self, request: pb.ListPathRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPathResponse:
        root = await self._directory(request.session_id)
        found = await self._catalog.complete_path(
            root, request.query, clamp_results(request.max_results)
        )
        return pb.ListPathResponse(entries=[path_entry(entry) for entry in found])

    @serves
    async def ExecuteServiceCommand(
        self, request: pb.ExecuteServiceCommandRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServiceCommandOutput]:
        command = request.command.strip().lstrip("/")
        if command in REFUSED_COMMANDS:
            raise BetCodeError(
                ErrorCode.COMMAND_REFUSED,
                f"`{command}` is not run by this daemon: {REFUSED_COMMANDS[command]}",
                {"command": command},
            )
        if command not in SERVICE_COMMAND_NAMES:
            known = " and ".join(sorted(SERVICE_COMMAND_NAMES))
            raise invalid(f"unknown service command {command!r}; this daemon runs {known}")
        root = await self._directory(request.session_id)
        if command == "pwd":
            yield _line(str(root))
        else:
            self._catalog.forget(root)
            commands = await self._catalog.commands(root, request.session_id)
            agents = await self._catalog.agents(root, request.session_id)
            yield _line(f"Reloaded {len(commands)} commands and {len(agents)} agents")
        yield pb.ServiceCommandOutput(exit_code=0)

    @serves
    async def ListPlugins(
        self, request: pb.ListPluginsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPluginsResponse:
        return pb.ListPluginsResponse()

    # The plugin methods other than ListPlugins: UNIMPLEMENTED, saying so.

    @serves
    async def GetPluginStatus(
        self, request: pb.GetPluginStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPluginStatusResponse:
        raise _no_plugins()

    @serves
    async def AddPlugin(
        self, request: pb.AddPluginRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddPluginResponse:
        raise _no_plugins()

    @serves
    async def RemovePlugin(
        self, request: pb.RemovePluginRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemovePluginResponse:
        raise _no_plugins()

    @serves
    async def EnablePlugin(
        self, request: pb.EnablePluginRequest, context: grpc.aio.ServicerContext
    ) -> pb.EnablePluginResponse:
        raise _no_plugins()

    @serves
    async def DisablePlugin(
        self, request: pb.DisablePluginRequest, context: grpc.aio.ServicerContext
    ) -> pb.DisablePluginResponse:
        raise _no_plugins()


def _no_plugins() -> BetCodeError:
    return BetCodeError(
        ErrorCode.NOT_IMPLEMENTED,
        "this daemon does not support plugins (ListPlugins answers an empty list)",
    )
