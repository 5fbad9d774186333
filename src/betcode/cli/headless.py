"""What `betcode run` makes of one turn's events: the answer's text, the requests it approves,
the ones it leaves waiting for the user, and the exit code. No I/O but writing to two streams.

The follower ignores the session's events until its own message comes back as UserInput, so a
continued session's earlier activity is never mistaken for this run's turn. A request is approved
only by `--yes` or by a matching `--allow` rule; every other request (and every question) is left
pending in the daemon, with a note on stderr saying how to answer it from any terminal.

Denials are counted from two sources: PermissionResolved for requests a client (or expiry)
refused, and the TurnComplete's list of every call claude was refused in the turn, which also
holds the ones no client ever saw (a BetCode deny rule, claude's own rules). Both name the tool
call's id, so a denial seen in both is counted once.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from google.protobuf import json_format

from betcode.cli.connection import CLIENT_ID, other_client_label
from betcode.cli.exit_codes import (
    AGENT_ERROR_CODE,
    ExitCode,
    exit_code_of_error,
    retry_after_seconds,
)
from betcode.permissions.cost_requests import COST_LIMIT_NOT_SENT, COST_LIMIT_TOOL
from betcode.permissions.engine import Behavior, RuleSet, evaluate
from betcode.permissions.forwarding import ASK_USER_QUESTION
from betcode.permissions.rules import RuleList, RuleSource, parse_rule
from betcode.v1 import agent_pb2

OUTPUTS = ("text", "json", "stream-json")
ALLOW_RULE_ORIGIN = "--allow"
QUIET_ERROR_CODES = frozenset({"API_RETRY"})  # retried by claude itself: a note, not a failure
# An answer of ours that lost a race (someone else answered first) is not a failure.
STALE_ANSWER_CODES = frozenset({"PERMISSION_STALE", "PERMISSION_NOT_FOUND"})
# The daemon stopped claude (plain `daemon stop`): a request still pending stays answerable.
DAEMON_STOPPED = "DAEMON_STOPPED"
DENIED_OUTCOMES = frozenset({"denied", "expired"})
MAX_SHOWN_INPUT = 120
MAX_DENIAL_MESSAGE = 500


def parse_allow_rules(texts: Sequence[str]) -> RuleSet:
    """The `--allow` rules as an allow list; raises InvalidRule for the first unusable one.
    Path rules are relative to the session's working directory."""
    source = RuleSource(ALLOW_RULE_ORIGIN, RuleList.ALLOW)
    return RuleSet(parse_rule(text, source) for text in texts)


@dataclass(frozen=True)
class Approver:
    """Which permission requests the run answers itself (always with ALLOW_ONCE)."""

    approve_all: bool
    rules: RuleSet
    cwd: str
    home: str

    def reason(self, request: agent_pb2.PermissionRequest) -> str | None:
        """Why the request is approved (`--yes` or the matching rule), or None to wait. A cost
        request (docs/LIMITS.md) always waits for a person: a run must not lift its own cap."""
        if request.tool_name == COST_LIMIT_TOOL:
            return None
        if self.approve_all:
            return "--yes"
        if not self.rules.rules:
            return None
        tool_input = json_format.MessageToDict(request.input)
        decision = evaluate(self.rules, request.tool_name, tool_input, cwd=self.cwd, home=self.home)
        if decision.behavior is not Behavior.ALLOW:
            return None
        return " + ".join(f"--allow {rule.text}" for rule in decision.rules)


@dataclass(frozen=True)
class Denial:
    request_id: str  # "" for a call refused without asking anyone (e.g. by a deny rule)
    tool_name: str
    outcome: str  # denied | expired
    message: str
    tool_use_id: str


@dataclass
class Streams:
    out: TextIO
    err: TextIO
    output: str = "text"  # text | json | stream-json
    socket_hint: str = ""  # " --socket PATH" when the run was given one

    def note(self, text: str) -> None:
        print(f"betcode: {text}", file=self.err, flush=True)


@dataclass
class TurnFollower:
    prompt: str
    approver: Approver
    streams: Streams
    session_id: str = ""
    started: bool = False  # our message came back as the session's UserInput
    done: bool = False
    blocks: list[str] = field(default_factory=list)
    usage: agent_pb2.UsageReport | None = None
    stop_reason: str = ""
    error: tuple[ExitCode, str, str] | None = None  # exit code, error code, message
    denials: list[Denial] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)  # request id -> tool name
    tool_use_ids: dict[str, str] = field(default_factory=dict)  # request id -> tool call id
    # tool call id -> the error claude was told (for a refusal, why; e.g. the deny rule)
    tool_errors: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # request id -> what it asks
    _open_block: bool = False
    _unanswered: dict[str, agent_pb2.AgentEvent] = field(default_factory=dict)  # by request id

    def on_event(self, event: agent_pb2.AgentEvent) -> list[str]:
        """Takes one event; returns the ids of permission requests to approve now."""
        kind = event.WhichOneof("event")
        if kind == "session_info" and not self.session_id:
            self.session_id = event.session_info.session_id
        if not self.started:
            if kind == "user_input" and event.user_input.content == self.prompt:
                self.started = True
            elif kind == "error" and event.sequence == 0:
                self._fail(event.error)  # our start or message was refused
                return []
            elif not self._about_our_held_message(event):
                return []
        if self.streams.output == "stream-json":
            data = json_format.MessageToDict(event, preserving_proto_field_name=True)
            print(json.dumps(data, separators=(",", ":")), file=self.streams.out, flush=True)
        handler = getattr(self, f"_on_{kind}", None)
        result = handler(event) if handler is not None else None
        return result if isinstance(result, list) else []

    def _about_our_held_message(self, event: agent_pb2.AgentEvent) -> bool:
        """A message past a cost cap is held before it is echoed: the cost request holding it,
        its answer and the daemon's word that the message was not sent are the run's own."""
        kind = event.WhichOneof("event")
        if kind == "permission_request":
            request = event.permission_request
            return (
                request.tool_name == COST_LIMIT_TOOL
                and request.input.fields["message"].string_value == self.prompt
            )
        if kind == "permission_resolved":
            return event.permission_resolved.request_id in self.tools
        return kind == "error" and event.error.code == COST_LIMIT_NOT_SENT and bool(self.tools)

    def catch_up(self, history: Sequence[agent_pb2.AgentEvent]) -> None:
        """Takes a batch of the session's history before our message (not shown), keeping the
        requests still unanswered in it: they hold up our turn too."""
        for event in history:
            kind = event.WhichOneof("event")
            if kind == "permission_request":
                self._unanswered[event.permission_request.request_id] = event
            elif kind == "user_question":
                self._unanswered[event.user_question.question_id] = event
            elif kind == "permission_resolved":
                self._unanswered.pop(event.permission_resolved.request_id, None)

    def caught_up(self) -> list[str]:
        """At the live edge: the requests left unanswered before our message are waited for
        (or approved) like our own. Returns the ids of permission requests to approve now."""
        approve: list[str] = []
        for event in self._unanswered.values():
            if event.WhichOneof("event") == "user_question":
                self._on_user_question(event)
            else:
                approve += self._on_permission_request(event)
        self._unanswered.clear()
        return approve

    # --- one handler per event kind -----------------------------------------------------

    def _on_text_delta(self, event: agent_pb2.AgentEvent) -> None:
        delta = event.text_delta
        if event.parent_tool_use_id:  # a subagent's text is not the answer
            return
        if delta.text:
            if not self._open_block:
                if self.blocks:
                    self._write("\n\n")
                self.blocks.append("")
                self._open_block = True
            self.blocks[-1] += delta.text
            self._write(delta.text)
        if delta.is_complete:
            self._open_block = False

    def _on_tool_call_start(self, event: agent_pb2.AgentEvent) -> None:
        start = event.tool_call_start
        if start.tool_name == ASK_USER_QUESTION:  # said as the question it asks, not as JSON
            return
        if self.streams.output == "text" and not event.parent_tool_use_id:
            self.streams.note(f"{start.tool_name}: {_shown_input(start.input)}")

    def _on_tool_call_result(self, event: agent_pb2.AgentEvent) -> None:
        result = event.tool_call_result
        if result.is_error:
            self.tool_errors[result.tool_id] = _shortened(result.output, MAX_DENIAL_MESSAGE)

    def _on_permission_request(self, event: agent_pb2.AgentEvent) -> list[str]:
        request = event.permission_request
        if request.request_id in self.tools:
            return []  # re-sent after a reconnect: already handled
        self.tools[request.request_id] = request.tool_name
        self.tool_use_ids[request.request_id] = request.tool_use_id
        shown = request.description if request.tool_name == COST_LIMIT_TOOL else None
        what = f"{request.tool_name}: {shown or _shown_input(request.input)}"
        reason = self.approver.reason(request)
        if reason is not None:
            self.streams.note(f"approved ({reason}) {what}")
            return [request.request_id]
        self.waiting[request.request_id] = what
        hint = self.streams.socket_hint
        rid = shlex.quote(request.request_id)
        self.streams.note(
            f"waiting for your approval of {what}\n"
            f"  approve from any terminal:  betcode permissions allow {rid}{hint}\n"
            f"  or deny:                    betcode permissions deny {rid}{hint} --message TEXT"
        )
        return []

    def _on_user_question(self, event: agent_pb2.AgentEvent) -> None:
        question = event.user_question
        if question.question_id in self.tools:
            return
        self.tools[question.question_id] = ASK_USER_QUESTION
        asked = [prompt.question for prompt in question.questions] or [question.question]
        self.waiting[question.question_id] = "question: " + " / ".join(asked)
        rid = shlex.quote(question.question_id)
        self.streams.note(
            f"claude asks: {' / '.join(asked)}\n"
            f"  see the options:  betcode permissions answer {rid}{self.streams.socket_hint}\n"
            f"  answer:           betcode permissions answer {rid}{self.streams.socket_hint}"
            " ANSWER... (one per question)"
        )

    def _on_permission_resolved(self, event: agent_pb2.AgentEvent) -> None:
        resolved = event.permission_resolved
        if resolved.request_id not in self.tools:
            return
        was_waiting = self.waiting.pop(resolved.request_id, None)
        if resolved.outcome in DENIED_OUTCOMES:
            request_id = resolved.request_id
            self.denials.append(
                Denial(
                    request_id,
                    self.tools[request_id],
                    resolved.outcome,
                    resolved.message,
                    self.tool_use_ids.get(request_id, ""),
                )
            )
        if was_waiting is not None:
            decider = resolved.decided_by_client_id
            by = f" by {other_client_label(decider, CLIENT_ID)}" if decider else ""
            self.streams.note(f"{resolved.outcome}{by}: {was_waiting}")

    def _on_permission_reminder(self, event: agent_pb2.AgentEvent) -> None:
        reminder = event.permission_reminder
        if reminder.request_id in self.waiting:
            self.streams.note(
                f"still waiting ({reminder.waiting_seconds} s) for an answer to "
                f"{self.waiting[reminder.request_id]}"
            )

    def _on_usage(self, event: agent_pb2.AgentEvent) -> None:
        self.usage = event.usage

    def _on_error(self, event: agent_pb2.AgentEvent) -> None:
        error = event.error
        if error.code == COST_LIMIT_NOT_SENT:  # the denial (exit 3) is counted already
            self.streams.note(f"{error.code}: {error.message}")
            self.done = True
            return
        if error.code in QUIET_ERROR_CODES or (
            event.sequence == 0 and error.code in STALE_ANSWER_CODES
        ):
            self.streams.note(error.message)
            return
        if event.sequence == 0 and not error.is_fatal:
            self.streams.note(f"{error.code}: {error.message}")  # e.g. our answer was refused
            return
        if error.code == DAEMON_STOPPED and self.waiting:
            # Answered after the start, the request goes to a resumed claude (told as a
            # message), whose next turn carries on with the work: the run waits for that.
            self.streams.note(f"{error.code}: {error.message}; still waiting for the answer")
            return
        self._fail(error)

    def _on_turn_complete(self, event: agent_pb2.AgentEvent) -> None:
        complete = event.turn_complete
        counted = {denial.tool_use_id for denial in self.denials if denial.tool_use_id}
        for refused in complete.permission_denials:
            if refused.tool_use_id in counted:
                continue
            counted.add(refused.tool_use_id)
            message = self.tool_errors.get(refused.tool_use_id, "")
            self.denials.append(
                Denial("", refused.tool_name, "denied", message, refused.tool_use_id)
            )
            what = f"{refused.tool_name}: {_shown_input(refused.tool_input)}"
            self.streams.note(f"denied: {what}" + (f" ({message})" if message else ""))
        self.stop_reason = complete.stop_reason
        self.done = True

    # --- results ------------------------------------------------------------------------

    def _fail(self, error: agent_pb2.ErrorEvent) -> None:
        code = exit_code_of_error(error.code, error.details)
        # claude's own failed turn is followed by its usage and TurnComplete; the rest end it.
        ends_turn = error.code != AGENT_ERROR_CODE or error.is_fatal
        self.give_up(code, error.code or "ERROR", error.message, ends_turn=ends_turn)
        if code is ExitCode.RATE_LIMITED:
            seconds = retry_after_seconds(error.details)
            print(
                f"Error: Rate limit exceeded. Retry after {seconds} seconds.",
                file=self.streams.err,
                flush=True,
            )

    def give_up(
        self, code: ExitCode, error_code: str, message: str, *, ends_turn: bool = True
    ) -> None:
        """Records the run's failure (kept for the summary) and notes it on stderr."""
        self.error = (code, error_code, message)
        self.done = self.done or ends_turn
        self.streams.note(f"{error_code}: {message}")

    def _write(self, text: str) -> None:
        if self.streams.output == "text":
            self.streams.out.write(text)
            self.streams.out.flush()

    @property
    def text(self) -> str:
        return "\n\n".join(self.blocks)

    def exit_code(self) -> ExitCode:
        if self.error is not None:
            return self.error[0]
        if self.stop_reason == "cancelled":
            return ExitCode.AGENT_ERROR
        if self.denials:
            return ExitCode.PERMISSION_DENIED
        return ExitCode.OK

    def summary(self) -> dict[str, Any]:
        """The `--output json` object (also the last line of stream-json)."""
        usage = (
            json_format.MessageToDict(self.usage, preserving_proto_field_name=True)
            if self.usage is not None
            else {}
        )
        return {
            "session_id": self.session_id,
            "text": self.text,
            "usage": usage,
            "cost_usd": self.usage.cost_usd if self.usage is not None else 0.0,
            "denials": [dataclasses.asdict(denial) for denial in self.denials],
            "waiting": sorted(self.waiting),
            "stop_reason": self.stop_reason,
            "error": ({"code": self.error[1], "message": self.error[2]} if self.error else None),
            "exit_code": int(self.exit_code()),
        }


def _shown_input(tool_input: Any) -> str:
    data = json_format.MessageToDict(tool_input)
    shown = data.get("command") or data.get("file_path") or data.get("url") or json.dumps(data)
    return _shortened(str(shown), MAX_SHOWN_INPUT)


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
