"""How every `betcode` command finds what an id argument names: a session, a permission
request, a subagent, a plan, a worktree or a rescue.

A reference is the full id, a unique start of it (at least MIN_PREFIX characters after a kind
word such as `orch-`, like the short ids the tables print: `short_id`), or the thing's name.
The full id wins over a name and a name over a prefix. Several matches are an error listing
them (exit 5); none is an error saying where to look (exit 6, the not-found code), never an
empty success. The daemon's own list calls are the source, so this module is the only place
that decides, and shell completion offers the same ids and names.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import click
from click.shell_completion import CompletionItem

from betcode.cli.connection import (
    DaemonClient,
    DaemonError,
    RequestRejected,
    SessionNotFound,
    resolve_daemon_address,
)
from betcode.cli.exit_codes import ExitCode
from betcode.v1 import agent_pb2, subagent_pb2, subagent_pb2_grpc, worktree_pb2, worktree_pb2_grpc

T = TypeVar("T")

MIN_PREFIX = 4
SHORT_ID = 8  # distinguishing characters a table prints of an id
# A kind word before a UUID ("orch-…" plans, "cost-…" cost requests) distinguishes nothing.
_KIND_WORD = re.compile(r"[a-z]+-(?=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$)")
MAX_LISTED = 5  # matches an ambiguity error names
COMPLETION_TIMEOUT_SECONDS = 2.0  # a Tab press must never hang the shell


def _kind_word(identifier: str) -> str:
    found = _KIND_WORD.match(identifier)
    return found.group() if found else ""


def short_id(identifier: str) -> str:
    """The start of `identifier` a table prints: SHORT_ID characters after its kind word."""
    return identifier[: len(_kind_word(identifier)) + SHORT_ID]


class AmbiguousReference(RequestRejected):
    exit_code = ExitCode.INVALID_ARGUMENTS


class PrefixTooShort(RequestRejected):
    exit_code = ExitCode.INVALID_ARGUMENTS


class NotFound(SessionNotFound):
    """No such session, request, subagent, worktree or rescue (exit 6)."""


@dataclass(frozen=True)
class IdKind(Generic[T]):
    """One kind of thing with an id: how the daemon lists them and what names one."""

    noun: str
    listing: str  # the command that lists them, for the not-found message
    fetch: Callable[[DaemonClient], Awaitable[Sequence[T]]]
    id_of: Callable[[T], str]
    name_of: Callable[[T], str]

    async def find(self, client: DaemonClient, reference: str) -> T:
        return self.pick(reference, await self.fetch(client))

    def pick(self, reference: str, items: Sequence[T]) -> T:
        """The one item `reference` names (see the module's rules), or the error."""
        for matches in (
            [item for item in items if self.id_of(item) == reference],
            [item for item in items if reference and self.name_of(item) == reference],
        ):
            if matches:
                return self._one(reference, matches)
        started = [item for item in items if reference and self.id_of(item).startswith(reference)]
        word = _kind_word(self.id_of(started[0])) if started else ""
        if started and len(reference) < len(word) + MIN_PREFIX:
            after = f" after {word!r}" if word else ""
            raise PrefixTooShort(
                f"{reference!r} is too short to name a {self.noun}: give at least "
                f"{MIN_PREFIX} characters of its id{after}, or its name"
            )
        if not started:
            raise NotFound(
                f"no {self.noun} {reference!r} in the daemon; `{self.listing}` shows them",
                code="NOT_FOUND",
            )
        return self._one(reference, started)

    def _one(self, reference: str, matches: Sequence[T]) -> T:
        if len(matches) == 1:
            return matches[0]
        listed = ", ".join(self._label(item) for item in matches[:MAX_LISTED])
        more = f" and {len(matches) - MAX_LISTED} more" if len(matches) > MAX_LISTED else ""
        raise AmbiguousReference(
            f"{reference!r} matches {len(matches)} {self.noun}s: {listed}{more}; "
            "give more of the id"
        )

    def _label(self, item: T) -> str:
        name = self.name_of(item)
        return f"{self.id_of(item)} ({name})" if name else self.id_of(item)

    def completions(self, items: Sequence[T], incomplete: str) -> list[CompletionItem]:
        """Ids and names starting with `incomplete`; an id's help is its name and back."""
        offered: list[CompletionItem] = []
        names: set[str] = set()  # a session's name names each of its waiting requests
        for item in items:
            identifier, name = self.id_of(item), self.name_of(item)
            if identifier.startswith(incomplete):
                offered.append(CompletionItem(identifier, help=name or None))
            if name and name.startswith(incomplete) and " " not in name and name not in names:
                names.add(name)
                offered.append(CompletionItem(name, help=identifier))
        return offered

    def complete(
        self, ctx: click.Context, _param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        """click's shell_complete: asks the daemon (of --socket when given so far); offers
        nothing when it cannot be reached in time, rather than an error in the shell."""
        socket = ctx.params.get("socket_path")

        async def fetch() -> Sequence[T]:
            address = resolve_daemon_address(socket if isinstance(socket, str) else None)
            async with await DaemonClient.connect(address) as client:
                return await asyncio.wait_for(self.fetch(client), COMPLETION_TIMEOUT_SECONDS)

        try:
            items = asyncio.run(fetch())
        except (DaemonError, TimeoutError, OSError):
            return []
        return self.completions(items, incomplete)


async def _sessions(client: DaemonClient) -> Sequence[agent_pb2.SessionSummary]:
    return list((await client.list_sessions()).sessions)


@dataclass(frozen=True)
class WaitingRequest:
    """A waiting request, named by the session that asks (its one request, when it has one)."""

    row: agent_pb2.PendingPermission
    session_name: str


async def _waiting_requests(client: DaemonClient) -> Sequence[WaitingRequest]:
    rows = await client.list_pending_permissions()
    names = {session.id: session.name for session in await _sessions(client)}
    return [WaitingRequest(row, names.get(row.session_id, "")) for row in rows]


async def _subagents(client: DaemonClient) -> Sequence[subagent_pb2.SubagentInfo]:
    stub = client.service_stub(subagent_pb2_grpc.SubagentServiceStub)
    response = await client.call(stub.ListSubagents, subagent_pb2.ListSubagentsRequest())
    return list(response.subagents)


async def _plans(client: DaemonClient) -> Sequence[subagent_pb2.OrchestrationInfo]:
    stub = client.service_stub(subagent_pb2_grpc.SubagentServiceStub)
    request = subagent_pb2.ListOrchestrationsRequest()
    return list((await client.call(stub.ListOrchestrations, request)).orchestrations)


async def _worktrees(client: DaemonClient) -> Sequence[worktree_pb2.WorktreeDetail]:
    stub = client.service_stub(worktree_pb2_grpc.WorktreeServiceStub)
    response = await client.call(stub.ListWorktrees, worktree_pb2.ListWorktreesRequest())
    return list(response.worktrees)


async def _rescues(client: DaemonClient) -> Sequence[worktree_pb2.RescueInfo]:
    stub = client.service_stub(worktree_pb2_grpc.WorktreeServiceStub)
    response = await client.call(stub.ListRescues, worktree_pb2.ListRescuesRequest())
    return list(response.rescues)


SESSIONS: IdKind[agent_pb2.SessionSummary] = IdKind(
    "session", "betcode sessions list", _sessions, lambda s: s.id, lambda s: s.name
)
REQUESTS: IdKind[WaitingRequest] = IdKind(
    "waiting request",
    "betcode permissions pending",
    _waiting_requests,
    lambda r: r.row.request_id,
    lambda r: r.session_name,
)
SUBAGENTS: IdKind[subagent_pb2.SubagentInfo] = IdKind(
    "subagent", "betcode subagent list", _subagents, lambda s: s.id, lambda s: s.name
)
WORKTREES: IdKind[worktree_pb2.WorktreeDetail] = IdKind(
    "worktree", "betcode worktree list", _worktrees, lambda w: w.id, lambda w: w.name
)
PLANS: IdKind[subagent_pb2.OrchestrationInfo] = IdKind(
    "plan", "betcode orchestrate list", _plans, lambda p: p.id, lambda _p: ""
)
RESCUES: IdKind[worktree_pb2.RescueInfo] = IdKind(
    "rescue", "betcode worktree rescue list", _rescues, lambda r: r.id, lambda _r: ""
)


async def find_session(client: DaemonClient, reference: str) -> agent_pb2.SessionSummary:
    return await SESSIONS.find(client, reference)


async def session_id_of(client: DaemonClient, reference: str) -> str:
    """The full id of the session `reference` names; "" stays "" (no session given)."""
    return (await SESSIONS.find(client, reference)).id if reference else ""


async def subagent_id_of(client: DaemonClient, reference: str) -> str:
    return (await SUBAGENTS.find(client, reference)).id


async def worktree_id_of(client: DaemonClient, reference: str) -> str:
    return (await WORKTREES.find(client, reference)).id
