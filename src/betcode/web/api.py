"""The JSON endpoints: sessions (list, create), the input lock, the requests waiting for an
answer and the answers to them. Each checks its fields like the gRPC services do, then calls the
same domain object; a refusal is the gRPC code and message with an HTTP status (`errors`)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import Any

from aiohttp import web

from betcode.core import convert
from betcode.core.validation import check_answers, check_id, check_text, invalid
from betcode.permissions.cost_requests import is_cost_request
from betcode.permissions.decisions import AnswerError, ClientAnswer
from betcode.permissions.grants import grant_from_request
from betcode.sessions.manager import SessionNotFound
from betcode.storage import worktrees as worktree_rows
from betcode.storage.pending import PendingPermission
from betcode.storage.worktrees import RepoRecord, WorktreeRecord
from betcode.v1 import common_pb2
from betcode.web.access import via
from betcode.web.domain import WebDomain, web_client_id
from betcode.web.errors import json_body, text_field
from betcode.web.events import message_json

DOMAIN_KEY = web.AppKey("domain", WebDomain)
SESSION_PAGE = 200
MAX_SESSION_NAME = 200
MAX_DIRECTORIES = 50
EVENT_PAGE = 500
# The page's names for PermissionDecision values: the enum names without their prefix.
DECISIONS = {
    name.removeprefix("PERMISSION_DECISION_").lower(): value
    for name, value in common_pb2.PermissionDecision.items()
    if value != common_pb2.PERMISSION_DECISION_UNSPECIFIED
}


def api_routes() -> list[web.RouteDef]:
    return [
        web.get("/api/sessions", list_sessions),
        web.post("/api/sessions", create_session),
        web.post("/api/sessions/{session_id}/lock", request_lock),
        web.get("/api/sessions/{session_id}/events", session_events),
        web.patch("/api/sessions/{session_id}", rename_session),
        web.delete("/api/sessions/{session_id}", delete_session),
        web.get("/api/directories", list_directories),
        web.get("/api/permissions", list_waiting),
        web.post("/api/permissions/{request_id}", answer_permission),
    ]


async def list_sessions(request: web.Request) -> web.Response:
    """Newest first, each with its count of waiting approvals; `pending` is the total."""
    domain = request.app[DOMAIN_KEY]
    page = await domain.sessions.list(limit=SESSION_PAGE)
    waiting = await domain.bridge.list_pending(None)
    counts = Counter(row.session_id for row in waiting)
    summaries = await convert.session_summaries(page.sessions)
    sessions = [{**message_json(summary), "pending": counts[summary.id]} for summary in summaries]
    return web.json_response({"sessions": sessions, "total": page.total, "pending": len(waiting)})


async def list_waiting(request: web.Request) -> web.Response:
    """Every request waiting for an answer, in any session, oldest first (the page's action bar
    and inbox), each with the rule an ALLOW_SESSION answer would add (`session_rule`; null: the
    call cannot be scoped, so it is allowed once only)."""
    domain = request.app[DOMAIN_KEY]
    rows = await domain.bridge.list_pending(None)
    return web.json_response({"waiting": [_waiting_json(row) for row in rows]})


def _waiting_json(row: PendingPermission) -> dict[str, object]:
    tool_input = _json_object(row.input)
    suggestions = json.loads(row.permission_suggestions or "[]")
    # A question, or a cost request (docs/LIMITS.md: any allow sends its message once), adds no
    # rule.
    scoped = not row.is_question and not is_cost_request(row)
    grant = grant_from_request(row.tool_name, tool_input, suggestions) if scoped else None
    return {
        "request_id": row.request_id,
        "session_id": row.session_id,
        "tool_name": row.tool_name,
        "description": row.tool_description or "",
        "input": tool_input,
        "is_question": row.is_question,
        "received_at": int(row.received_at * 1000),
        "expires_at": int(row.expires_at * 1000),
        "session_rule": grant.rule_text if grant is not None else None,
    }


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def create_session(request: web.Request) -> web.Response:
    domain = request.app[DOMAIN_KEY]
    body = await json_body(request)
    client_id = web_client_id(request)
    session = await domain.sessions.create(
        working_directory=text_field(body, "working_directory"),
        model=check_id(text_field(body, "model"), "model", required=False),
        client_id=client_id,
    )
    return web.json_response({"session_id": session.id}, status=201)


async def session_events(request: web.Request) -> web.Response:
    """A page of a session's stored events, newest last: the `limit` (at most EVENT_PAGE)
    before sequence `before` (none: the newest). A page opens a long session with its recent
    part, then streams `from` its last sequence, and pages back as the reader scrolls up.
    `{"events": [...], "first": its first sequence, "last": the session's last}`."""
    domain = request.app[DOMAIN_KEY]
    session = await domain.session(request.match_info["session_id"], web_client_id(request))
    limit = min(_count(request, "limit", EVENT_PAGE), EVENT_PAGE)
    _, last = await domain.reader.max_sequences(session.id)
    end = min(_count(request, "before", last + 1), last + 1)  # exclusive
    start = max(0, end - 1 - limit)  # sequences are contiguous from 1
    count = end - 1 - start
    rows = await domain.reader.read_events(session.id, start, count) if count > 0 else []
    body = domain.events.batch([payload for _, payload in rows])
    first = rows[0][0] if rows else end
    return web.Response(
        text=f'{{"events":{body},"first":{first},"last":{last}}}', content_type="application/json"
    )


def _count(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise invalid(f"{name} must be a whole number, got {text!r}")
    return int(text)


async def rename_session(request: web.Request) -> web.Response:
    domain = request.app[DOMAIN_KEY]
    body = await json_body(request)
    name = check_text(text_field(body, "name"), "name").strip()
    if len(name) > MAX_SESSION_NAME:
        raise invalid(f"a session name is at most {MAX_SESSION_NAME} characters")
    session_id = check_id(request.match_info["session_id"], "session_id")
    await domain.sessions.rename(session_id, name)
    return web.json_response({"session_id": session_id, "name": name})


async def delete_session(request: web.Request) -> web.Response:
    """Stops its claude and removes it (its audit trail stays), as `betcode sessions delete`."""
    domain = request.app[DOMAIN_KEY]
    session_id = check_id(request.match_info["session_id"], "session_id")
    if not await domain.sessions.delete(session_id, web_client_id(request)):
        raise SessionNotFound(session_id)
    return web.json_response({"deleted": True})


async def list_directories(request: web.Request) -> web.Response:
    """Where a new session may start, to pick rather than type: registered repositories, their
    worktrees, and the directories of recent sessions."""
    domain = request.app[DOMAIN_KEY]

    def read(conn: sqlite3.Connection) -> tuple[list[RepoRecord], list[WorktreeRecord]]:
        return worktree_rows.list_repos(conn)[0], worktree_rows.list_worktrees(conn)

    repos, worktrees = await domain.reader.read(read)
    recent = await domain.sessions.list(limit=SESSION_PAGE)
    listed = [
        *({"path": r.repo_path, "label": r.name, "kind": "repository"} for r in repos),
        *(
            {"path": w.path, "label": f"{w.name} ({w.branch})", "kind": "worktree"}
            for w in worktrees
        ),
        *(
            {"path": s.working_directory, "label": s.working_directory, "kind": "recent"}
            for s in recent.sessions
        ),
    ]
    unique: dict[str, dict[str, str]] = {}
    for entry in listed:
        unique.setdefault(entry["path"], entry)  # a repository's own label wins
    return web.json_response({"directories": list(unique.values())[:MAX_DIRECTORIES]})


async def request_lock(request: web.Request) -> web.Response:
    """RequestInputLock: the holder has the transfer timeout to keep it by sending input."""
    domain = request.app[DOMAIN_KEY]
    client_id = web_client_id(request)
    session = await domain.session(request.match_info["session_id"], client_id)
    previous = session.lock.holder or ""
    granted = await session.request_input_lock(client_id)
    return web.json_response({"granted": granted, "previous_holder": previous})


async def answer_permission(request: web.Request) -> web.Response:
    """AnswerPermission: a request of any session, without the input lock (an approval may be
    answered from anywhere); a repeated answer succeeds and changes nothing (`duplicate`)."""
    domain = request.app[DOMAIN_KEY]
    body = await json_body(request)
    client_id = web_client_id(request)
    answer = ClientAnswer(
        request_id=check_id(request.match_info["request_id"], "request_id"),
        decision=_decision(body.get("decision", "")),
        message=check_text(text_field(body, "message"), "message"),
        answers=check_answers(_answers(body.get("answers", {})), "answers"),
        client_id=client_id,
        via=via(request),
    )
    row = await domain.bridge.find_request(answer.request_id)
    if row is None:
        raise AnswerError.not_found(answer.request_id)
    session = await domain.session(row.session_id, client_id)
    outcome = await domain.bridge.answer(session, answer)
    return web.json_response(
        {"accepted": outcome.accepted, "duplicate": outcome.duplicate, "outcome": outcome.outcome}
    )


def _decision(name: Any) -> int:
    if name == "":
        return common_pb2.PERMISSION_DECISION_UNSPECIFIED  # a question's answers
    if not isinstance(name, str) or name not in DECISIONS:
        raise invalid(f"decision {name!r} is not one of {', '.join(DECISIONS)}")
    return DECISIONS[name]


def _answers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(text, str) for key, text in value.items()
    ):
        raise invalid("answers must be an object of question text to answer text")
    return value
