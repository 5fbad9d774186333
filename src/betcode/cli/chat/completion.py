"""The palette at work: asks the daemon's CommandService what the token at the cursor could
become (a command after `/`; paths and agents after `@`), and keeps what is shown. The registry
is fetched again each time `/` opens the list (it changes as files change); paths and agents
are fetched per keystroke (the daemon answers from its caches)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from betcode.cli.chat.palette import (
    MAX_SUGGESTIONS,
    Completing,
    Suggestion,
    Token,
    agent_query,
    agent_suggestions,
    command_suggestions,
    path_suggestions,
    token_at,
)
from betcode.cli.chat.widgets import Suggestions
from betcode.cli.connection import DaemonClient, DaemonError
from betcode.v1 import commands_pb2

MAX_AGENTS = 4  # agent mentions shown among the path suggestions


async def _nothing() -> list[commands_pb2.AgentInfo]:
    return []


class Palette:
    def __init__(
        self, client: DaemonClient, session_id: Callable[[], str], view: Suggestions
    ) -> None:
        self._client = client
        self._session_id = session_id
        self._view = view
        self._registry: list[commands_pb2.CommandEntry] = []
        self.token: Token | None = None
        self.suggestions: list[Suggestion] = []

    @property
    def is_open(self) -> bool:
        return bool(self.suggestions)

    async def update(self, text: str, cursor: int) -> None:
        """Shows the suggestions for the token at the cursor (none: the list closes). A daemon
        that cannot answer (no session yet, a refused query) just shows nothing."""
        token = token_at(text, cursor)
        suggestions: list[Suggestion] = []
        try:
            if token is not None and token.kind is Completing.COMMAND:
                if not token.query or not self._registry:
                    self._registry = await self._client.command_registry(self._session_id())
                suggestions = command_suggestions(self._registry, token.query)
            elif token is not None and self._session_id():
                suggestions = await self._paths_and_agents(self._session_id(), token.query)
        except DaemonError:
            suggestions = []
        self._show(token, suggestions)

    async def _paths_and_agents(self, session_id: str, query: str) -> list[Suggestion]:
        """Paths first; a few agents after them when the query could name one."""
        wanted = agent_query(query)
        paths, agents = await asyncio.gather(
            self._client.list_path(session_id, query, MAX_SUGGESTIONS),
            self._client.list_agents(session_id, wanted, MAX_AGENTS)
            if wanted is not None
            else _nothing(),
        )
        mentions = agent_suggestions(agents)
        return [*path_suggestions(paths)[: MAX_SUGGESTIONS - len(mentions)], *mentions]

    def _show(self, token: Token | None, suggestions: list[Suggestion]) -> None:
        self.token, self.suggestions = token, suggestions
        self._view.show(suggestions)

    def close(self) -> None:
        self._show(None, [])

    def move(self, step: int) -> None:
        if step > 0:
            self._view.action_cursor_down()
        else:
            self._view.action_cursor_up()

    @property
    def chosen(self) -> Suggestion | None:
        index = self._view.highlighted
        if index is None or not 0 <= index < len(self.suggestions):
            return None
        return self.suggestions[index]
