"""What the page's message box completes: `/` commands sent to claude as the message (the
project's, the user's, claude's own; not BetCode's local ones, which a browser cannot run)
and `@` paths in the session's tree, from the same catalog as the gRPC CommandService."""

from __future__ import annotations

from aiohttp import web

from betcode.commands.catalog import CommandCatalog
from betcode.commands.current_directory import Place, SessionDirectories, session_place
from betcode.commands.path_query import PathQueryError, clamp_results
from betcode.commands.registry import Mode
from betcode.core.validation import check_id, invalid
from betcode.sessions.manager import SessionNotFound

FILE_RESULTS = 20


class WebCommands:
    def __init__(self, sessions: SessionDirectories, catalog: CommandCatalog) -> None:
        self.sessions = sessions
        self.catalog = catalog


COMMANDS_KEY = web.AppKey("commands", WebCommands)


def command_routes() -> list[web.RouteDef]:
    return [
        web.get("/api/sessions/{session_id}/commands", list_commands),
        web.get("/api/sessions/{session_id}/files", list_files),
    ]


async def _place(request: web.Request, commands: WebCommands) -> Place:
    session_id = check_id(request.match_info["session_id"], "session_id")
    place = await session_place(commands.sessions, session_id)
    if place is None:
        raise SessionNotFound(session_id)
    return place


async def list_commands(request: web.Request) -> web.Response:
    commands = request.app[COMMANDS_KEY]
    specs = await commands.catalog.commands(await _place(request, commands))
    return web.json_response(
        {
            "commands": [
                {"name": spec.name, "description": spec.description, "args": spec.args_hint or ""}
                for spec in specs
                if spec.mode is Mode.PASSTHROUGH
            ]
        }
    )


async def list_files(request: web.Request) -> web.Response:
    commands = request.app[COMMANDS_KEY]
    place = await _place(request, commands)
    try:
        found = await commands.catalog.complete_path(
            place.directory, request.query.get("query", ""), clamp_results(FILE_RESULTS)
        )
    except PathQueryError as error:
        raise invalid(str(error)) from None
    return web.json_response({"files": [{"path": f.path, "kind": f.kind} for f in found]})
