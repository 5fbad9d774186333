"""The scenario table: what the mock model does, by name.

A scenario is a list of steps; step k answers the k-th model call of a turn (k = assistant
messages since the prompt). Once the steps are used up, the model ends the turn with a text
that quotes the tool results it received. Arguments come from the scenario's defaults,
overlaid with the JSON object written after the token: `SCN:tool_bash {"command": "ls"}`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from betcode.devtools.mock_anthropic.ask_input import ask_input
from betcode.devtools.mock_anthropic.conversation import Conversation, ScenarioArgsError
from betcode.devtools.mock_anthropic.replies import Reply, TextBlock, ToolUseBlock, text_reply

BASH_DEFAULT = "python3 -c \"print('hello-from-bash')\""
MAX_BASH_STEPS = 10


@dataclass(frozen=True)
class StepContext:
    """What a step sees: its arguments, the request, and how often it was already asked."""

    args: Mapping[str, Any]
    conversation: Conversation
    attempt: int  # earlier requests with this same conversation state (client retries)

    def value(self, name: str, kind: type | tuple[type, ...]) -> Any:
        value = self.args.get(name)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
            raise ScenarioArgsError(f"argument {name!r} must be {kind}, got {value!r}")
        return value

    def text(self, name: str) -> str:
        return str(self.value(name, str))

    def number(self, name: str) -> float:
        return float(self.value(name, (int, float)))

    def count(self, name: str) -> int:
        return int(self.value(name, int))


Step = Callable[[StepContext], Reply]


@dataclass(frozen=True)
class Scenario:
    description: str
    steps: tuple[Step, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)


def final_text(conversation: Conversation) -> str:
    """The closing text of a turn: every tool result the model just received, quoted."""
    if not conversation.tool_results:
        return "Mock model done."
    lines = [f"- {'error' if r.is_error else 'ok'}: {r.text}" for r in conversation.tool_results]
    return "Tool results seen by the mock model:\n" + "\n".join(lines)


def tool_step(tool: str, *fields: str) -> Step:
    """A step that calls `tool` once with the named arguments as its input.

    A relative `file_path` is made absolute against the CLI's cwd (file tools require that).
    """

    def step(ctx: StepContext) -> Reply:
        tool_input = {name: ctx.args[name] for name in fields if ctx.args.get(name) is not None}
        path = tool_input.get("file_path")
        cwd = ctx.conversation.cwd
        if isinstance(path, str) and cwd is not None and not PurePosixPath(path).is_absolute():
            tool_input["file_path"] = str(PurePosixPath(cwd) / path)
        return Reply(blocks=(ToolUseBlock(tool, tool_input),))

    return step


def _plain(ctx: StepContext) -> Reply:
    return text_reply(ctx.text("text"))


def _two_bash(ctx: StepContext) -> Reply:
    commands = ctx.value("commands", list)
    return Reply(
        blocks=(
            TextBlock("Running two commands."),
            *(ToolUseBlock("Bash", {"command": str(c), "description": "Run"}) for c in commands),
        )
    )


def _bash_step(ctx: StepContext) -> Reply:
    commands = ctx.value("commands", list)
    step = ctx.conversation.step
    if step >= len(commands):
        return text_reply(final_text(ctx.conversation))
    tool_input = {"command": str(commands[step]), "description": f"Step {step + 1}"}
    return Reply(blocks=(ToolUseBlock("Bash", tool_input),))


def _ask(ctx: StepContext) -> Reply:
    tool_input = ask_input(ctx.conversation.tools, ctx.count("questions"), bool(ctx.args["multi"]))
    return Reply(blocks=(ToolUseBlock("AskUserQuestion", tool_input),))


def _slow(ctx: StepContext) -> Reply:
    words = " ".join(f"word{n}" for n in range(1, ctx.count("words") + 1))
    return text_reply(words, delta_delay_s=ctx.number("delay"))


def _midstream_error(ctx: StepContext) -> Reply:
    if ctx.attempt > 0 or not ctx.conversation.stream:
        return text_reply(ctx.text("recovered"))
    return text_reply(ctx.text("text"), error_after_deltas=ctx.count("after_deltas"))


def _http_error(ctx: StepContext) -> Reply:
    if ctx.attempt >= ctx.count("times"):
        return text_reply(ctx.text("text"))
    status = ctx.count("status")
    return Reply(http_status=status, error_message=f"mock HTTP {status}")


def _stall_first_byte(ctx: StepContext) -> Reply:
    return text_reply(ctx.text("text"), stall_before_s=ctx.number("seconds"))


def _stall_mid_stream(ctx: StepContext) -> Reply:
    after = ctx.count("after_deltas")
    return text_reply(ctx.text("text"), stall_after_deltas=after, stall_s=ctx.number("seconds"))


def _http_scenario(status: int) -> Scenario:
    return Scenario(
        f"HTTP {status} for the first `times` attempts, then a text reply.",
        (_http_error,),
        {"status": status, "times": 1, "text": "Recovered after errors."},
    )


FILE_DEFAULTS = {"file_path": "notes.txt"}
STALL_TEXT = "The stalled stream finished after all."

SCENARIOS: Mapping[str, Scenario] = {
    "plain": Scenario("One text block.", (_plain,), {"text": "Hello from the mock model."}),
    "tool_bash": Scenario(
        "One Bash call, then a text quoting its result.",
        (tool_step("Bash", "command", "description"),),
        {"command": BASH_DEFAULT, "description": "Say hello"},
    ),
    "tool_read": Scenario("One Read call.", (tool_step("Read", "file_path"),), FILE_DEFAULTS),
    "tool_write": Scenario(
        "One Write call.",
        (tool_step("Write", "file_path", "content"),),
        {**FILE_DEFAULTS, "content": "written by the mock model\n"},
    ),
    "tool_edit": Scenario(
        "One Edit call.",
        (tool_step("Edit", "file_path", "old_string", "new_string", "replace_all"),),
        {**FILE_DEFAULTS, "old_string": "before", "new_string": "after", "replace_all": None},
    ),
    "two_tools": Scenario(
        "A text and two Bash calls in one message.",
        (_two_bash,),
        {"commands": ["python3 -c \"print('first')\"", "python3 -c \"print('second')\""]},
    ),
    "bash_steps": Scenario(
        f"One Bash call per model call, `commands` in order (at most {MAX_BASH_STEPS}), then "
        "a text quoting the results.",
        (_bash_step,) * MAX_BASH_STEPS,
        {"commands": [BASH_DEFAULT]},
    ),
    "ask": Scenario(
        "AskUserQuestion with `questions` (1-4) questions built from the CLI's tool schema.",
        (_ask,),
        {"questions": 1, "multi": False},
    ),
    "slow": Scenario(
        "`words` words, one pause of `delay` seconds after every delta.",
        (_slow,),
        {"words": 30, "delay": 0.05},
    ),
    "midstream_error": Scenario(
        "A stream that breaks off with an SSE error after `after_deltas` deltas; retries succeed.",
        (_midstream_error,),
        {
            "text": "This text will be cut off by an overloaded error.",
            "after_deltas": 2,
            "recovered": "Recovered after a stream error.",
        },
    ),
    "http_429": _http_scenario(429),
    "http_500": _http_scenario(500),
    "http_529": _http_scenario(529),
    "stall_first_byte": Scenario(
        "`seconds` of silence before the first byte, then a text reply.",
        (_stall_first_byte,),
        {"seconds": 30.0, "text": STALL_TEXT},
    ),
    "stall_mid_stream": Scenario(
        "`seconds` of silence after `after_deltas` deltas, then the rest of the stream.",
        (_stall_mid_stream,),
        {"seconds": 30.0, "after_deltas": 2, "text": STALL_TEXT},
    ),
}


def scenario_reply(scenario: Scenario, conversation: Conversation, attempt: int) -> Reply:
    """The reply of `scenario` for this request; raises ScenarioArgsError for bad arguments."""
    ctx = StepContext({**scenario.defaults, **conversation.args}, conversation, attempt)
    if conversation.step < len(scenario.steps):
        return scenario.steps[conversation.step](ctx)
    return text_reply(final_text(conversation))
