"""Picks the reply for each Messages API request: queued replies first, then the scenario.

Thread-safe: the HTTP server calls `choose` from one thread per connection.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import threading
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from betcode.devtools.mock_anthropic.ask_input import SchemaError
from betcode.devtools.mock_anthropic.conversation import (
    Conversation,
    ScenarioArgsError,
    read_conversation,
)
from betcode.devtools.mock_anthropic.replies import Reply, ToolUseBlock, text_reply
from betcode.devtools.mock_anthropic.scenarios import SCENARIOS, Scenario, scenario_reply


class UnknownScenarioError(KeyError):
    """A scenario name that is not in the table."""


class Director:
    def __init__(self, default_scenario: str = "plain") -> None:
        self._lock = threading.Lock()
        self._scenarios: dict[str, Scenario] = dict(SCENARIOS)
        self._queue: deque[Reply] = deque()
        self._attempts: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self.default_scenario = default_scenario

    def register(self, name: str, scenario: Scenario) -> None:
        """Add or replace a scenario of this mock instance (the module table stays unchanged)."""
        with self._lock:
            self._scenarios[name] = scenario

    def enqueue(self, *replies: Reply) -> None:
        """Answer the next /v1/messages requests with these replies, before any scenario."""
        with self._lock:
            self._queue.extend(replies)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_mock_{next(self._ids)}"

    def choose(self, body: Mapping[str, Any]) -> Reply:
        """The reply for one /v1/messages body, tool_use ids filled in.

        A scenario that cannot run (unknown name, bad arguments, no AskUserQuestion tool)
        answers with a text saying why, so the failing test shows it.
        """
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return self._with_ids(queued)
        try:
            reply = self._scenario_reply(read_conversation(body), body)
        except (ScenarioArgsError, SchemaError, UnknownScenarioError) as error:
            return text_reply(f"Mock model error: {error}")
        return self._with_ids(reply)

    def _scenario_reply(self, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        name = conversation.scenario or self.default_scenario
        fingerprint = hashlib.sha256(
            json.dumps(body.get("messages"), sort_keys=True).encode()
        ).hexdigest()
        with self._lock:
            scenario = self._scenarios.get(name)
            attempt = self._attempts[fingerprint]
            self._attempts[fingerprint] += 1
            known = sorted(self._scenarios)
        if scenario is None:
            raise UnknownScenarioError(f"unknown scenario {name!r}; known: {', '.join(known)}")
        return scenario_reply(scenario, conversation, attempt)

    def _with_ids(self, reply: Reply) -> Reply:
        blocks = tuple(
            dataclasses.replace(b, id=self.next_id("toolu"))
            if isinstance(b, ToolUseBlock) and b.id is None
            else b
            for b in reply.blocks
        )
        return dataclasses.replace(reply, blocks=blocks)
