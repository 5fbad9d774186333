"""betcode.v1.CommandService: thin — find where the call works, ask the catalog, convert.

A call for a session works in that session's directory; a call without session_id (the
upstream CLI sends none) in the daemon's current directory (commands/current_directory.py).
Service commands: `pwd` and `reload-remote`, and without session_id `cd`, which moves the
daemon's current directory. `cd` for a session, `bash` and `exit-daemon` (named by the upstream
daemon) are refused with FAILED_PRECONDITION and the reason: a session's directory is fixed, a
shell run here would bypass the permission gate, and the daemon stops with `betcode daemon
stop`. Plugins are not supported: the list is empty and the other plugin methods answer
UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from betcode.commands.catalog import CommandCatalog
from betcode.commands.current_directory import (
    BadDirectory,
    CurrentDirectory,
    DirectoryNotAllowed,
    NoCurrentDirectory,
    Place,
    SessionDirectories,
    session_place,
)
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
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import check_id, check_text, domain_error, invalid
from betcode.server.errors import translates_errors
from betcode.sessions.manager import SessionNotFound
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
CD = "cd"  # without session_id only: it moves the daemon's current directory
REFUSED_COMMANDS = {
    CD: "a session's working directory is fixed; start a session in the other directory "
    "(without session_id, `cd` moves the daemon's current directory)",
    "bash": "a shell run by the daemon would bypass the permission gate; ask claude, whose "
    "Bash tool goes through the permission rules",
    "exit-daemon": "stop the daemon with `betcode daemon stop` on its machine",
}


def _commands_error(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, PathQueryError | BadDirectory):
        return invalid(str(exc))
    if isinstance(exc, DirectoryNotAllowed):
        return BetCodeError(ErrorCode.PATH_NOT_ALLOWED, str(exc), {"path": str(exc.folder)})
    if isinstance(exc, NoCurrentDirectory):
        return BetCodeError(ErrorCode.PRECONDITION_FAILED, str(exc))
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


def _cd_argument(args: Sequence[str]) -> str:
    if len(args) > 1:
        raise invalid(f"cd takes one folder; got {len(args)} arguments")
    return args[0] if args else ""


class CommandService:
    def __init__(self, sessions: SessionDirectories, catalog: CommandCatalog) -> None:
        self._sessions = sessions
        self._current_directory = CurrentDirectory(sessions)
        self._catalog = catalog

    async def _place(self, session_id: str) -> Place:
        """The session's directory, or without session_id the daemon's current directory
        (SessionNotFound for an unknown id, NoCurrentDirectory when there is no session)."""
        if not session_id:
            return await self._current_directory.place()
        place = await session_place(self._sessions, check_id(session_id, "session_id"))
        if place is None:
            raise SessionNotFound(session_id)
        return place

    async def _place_if_any(self, session_id: str) -> Place | None:
        """As _place; None for a call without session_id while the daemon has no session."""
        try:
            return await self._place(session_id)
        except NoCurrentDirectory:
            return None

    @serves
    async def GetCommandRegistry(
        self, request: pb.GetCommandRegistryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCommandRegistryResponse:
        try:
            place = await self._place_if_any(request.session_id)
        except SessionNotFound:
            # A session about to start (upstream clients ask with its id before starting it):
            # the daemon-wide registry, as without an id.
            place = await self._place_if_any("")
        specs = await self._catalog.commands(place)
        return pb.GetCommandRegistryResponse(commands=[command_entry(spec) for spec in specs])

    @serves
    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        agents = await self._catalog.agents(await self._place_if_any(request.session_id))
        chosen = filter_agents(
            agents, check_text(request.query, "query"), clamp_results(request.max_results)
        )
        return pb.ListAgentsResponse(agents=[agent_info(agent) for agent in chosen])

    @serves
    async def ListPath(
        self, request: pb.ListPathRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPathResponse:
        place = await self._place(request.session_id)
        found = await self._catalog.complete_path(
            place.directory, request.query, clamp_results(request.max_results)
        )
        return pb.ListPathResponse(entries=[path_entry(entry) for entry in found])

    @serves
    async def ExecuteServiceCommand(
        self, request: pb.ExecuteServiceCommandRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServiceCommandOutput]:
        command = request.command.strip().lstrip("/")
        if command == CD and not request.session_id:
            moved = await self._current_directory.change(_cd_argument(request.args))
            printed = str(moved.directory)
        else:
            printed = await self._run_in_place(command, request.session_id)
        yield _line(printed)
        yield pb.ServiceCommandOutput(exit_code=0)

    async def _run_in_place(self, command: str, session_id: str) -> str:
        """`pwd` or `reload-remote` where the call works: the line it prints."""
        if command in REFUSED_COMMANDS:
            raise BetCodeError(
                ErrorCode.COMMAND_REFUSED,
                f"`{command}` is not run by this daemon: {REFUSED_COMMANDS[command]}",
                {"command": command},
            )
        if command not in SERVICE_COMMAND_NAMES:
            known = ", ".join(sorted(SERVICE_COMMAND_NAMES))
            raise invalid(
                f"unknown service command {command!r}; this daemon runs {known} "
                f"and, without session_id, {CD}"
            )
        place = await self._place(session_id)
        if command == "pwd":
            return str(place.directory)
        self._catalog.forget(place.directory)
        commands = await self._catalog.commands(place)
        agents = await self._catalog.agents(place)
        return f"Reloaded {len(commands)} commands and {len(agents)} agents"

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
