"""Real CLI through the daemon: BetCode's rules, forwarded answers, session grants, questions,
reminders and expiry, duplicate answers, answering from another terminal (`betcode
permissions`). The daemon runs in this event loop with its rules in a config dir of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.protobuf.struct_pb2 import Struct
from harness.cli_process import betcode
from harness.daemon import Client, Decision, InProcessDaemon, daemon_config
from harness.environment import Workspace

from betcode.cli.main import cli
from betcode.config.settings import PermissionSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic, Reply, ToolUseBlock
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

HELLO = "python3 -c \"print('hello-from-bash')\""
EDITED = "python3 -c \"print('edited-by-the-user')\""
BASH_PROMPT = "SCN:tool_bash run it"

StartDaemon = Callable[..., Awaitable[InProcessDaemon]]


@pytest.fixture
async def start_daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[StartDaemon]:
    """`await start_daemon(rules={...}, permissions=PermissionSettings(...))`: a real daemon
    whose config dir's settings.json holds `rules` as its `permissions` object."""
    running: list[Daemon] = []

    async def start(
        rules: dict[str, list[str]] | None = None, permissions: PermissionSettings | None = None
    ) -> InProcessDaemon:
        config_dir = tmp_path / "config"
        config_dir.mkdir(exist_ok=True)
        (config_dir / "settings.json").write_text(json.dumps({"permissions": rules or {}}))
        config = daemon_config(
            tmp_path / "daemon",
            claude_bin,
            workspace.env(mock_api.base_url),
            config_dir=config_dir,
            permissions=permissions or PermissionSettings(),
        )
        daemon = Daemon(config)
        running.append(daemon)
        await daemon.start()
        return InProcessDaemon(daemon, config)

    yield start
    for daemon in running:
        await daemon.stop()


@pytest.fixture
async def attach(workspace: Workspace) -> AsyncIterator[Callable[[InProcessDaemon], Client]]:
    """A client on a new session of the daemon (closed at teardown)."""
    made: list[Client] = []

    def make(daemon: InProcessDaemon) -> Client:
        client = Client(daemon.socket, f"client-{len(made)}")
        client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def results(client: Client, count: int = 1) -> list[agent_pb2.ToolCallResult]:
    await client.wait_for("tool_call_result", count)
    return [e.tool_call_result for e in client.of_kind("tool_call_result")]


async def test_an_allow_rule_of_betcode_runs_the_tool_without_asking(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client]
) -> None:
    daemon = await start_daemon(rules={"allow": ["Bash(python3:*)"]})
    client = attach(daemon)
    client.say(BASH_PROMPT)
    [result] = await results(client)
    await client.wait_for("turn_complete")
    assert result.output.strip() == "hello-from-bash"
    assert not result.is_error
    assert client.of_kind("permission_request") == []
    assert daemon.daemon.bridge is not None
    assert daemon.daemon.bridge.metrics.snapshot()["auto_allow"] == 1


async def test_a_deny_rule_of_betcode_denies_with_the_rule_named(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client]
) -> None:
    daemon = await start_daemon(rules={"deny": ["Bash(python3:*)"]})
    client = attach(daemon)
    client.say(BASH_PROMPT)
    [result] = await results(client)
    await client.wait_for("turn_complete")
    assert result.is_error
    assert "Denied by rule: Bash(python3:*)" in result.output
    assert client.of_kind("permission_request") == []


@pytest.mark.parametrize(
    ("decision", "message", "edited", "expect_error", "expect_text"),
    [
        (Decision.PERMISSION_DECISION_ALLOW_ONCE, "", None, False, "hello-from-bash"),
        (Decision.PERMISSION_DECISION_DENY, "not on a Friday", None, True, "not on a Friday"),
        (
            Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT,
            "",
            {"command": EDITED, "description": "Edited"},
            False,
            "edited-by-the-user",
        ),
    ],
    ids=["allow", "deny", "edit"],
)
async def test_a_forwarded_request_is_answered_by_the_client(
    start_daemon: StartDaemon,
    attach: Callable[[InProcessDaemon], Client],
    decision: Decision.ValueType,
    message: str,
    edited: dict[str, str] | None,
    expect_error: bool,
    expect_text: str,
) -> None:
    daemon = await start_daemon()
    client = attach(daemon)
    client.say(BASH_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    assert request.tool_name == "Bash"
    assert request.expires_at.seconds > 0
    response = agent_pb2.PermissionResponse(
        request_id=request.request_id, decision=decision, message=message
    )
    if edited is not None:
        struct = Struct()
        struct.update(edited)
        response.updated_input.CopyFrom(struct)
    client.send(agent_pb2.AgentRequest(permission=response))
    [result] = await results(client)
    await client.wait_for("turn_complete")
    assert result.is_error is expect_error
    assert expect_text in result.output
    resolved = (await client.wait_for("permission_resolved")).permission_resolved
    assert resolved.outcome == ("denied" if expect_error else "allowed")


async def test_allow_session_is_not_asked_again_for_the_same_command(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client]
) -> None:
    daemon = await start_daemon()
    client = attach(daemon)
    client.say(BASH_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_SESSION)
    await client.wait_for("turn_complete")
    client.say(BASH_PROMPT + " again")
    second = await results(client, 2)
    await client.wait_for("turn_complete", 2)
    assert second[1].output.strip() == "hello-from-bash"
    assert len(client.of_kind("permission_request")) == 1


async def test_ask_user_question_with_two_questions_gets_both_answers(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client]
) -> None:
    daemon = await start_daemon(rules={"allow": ["AskUserQuestion"]})
    client = attach(daemon)
    client.say('SCN:ask {"questions": 2, "multi": true} ask me')
    question = (await client.wait_for("user_question")).user_question
    assert len(question.questions) == 2
    assert all(len(prompt.options) >= 2 for prompt in question.questions)
    answers = {
        question.questions[0].question: question.questions[0].options[0].label,
        question.questions[1].question: ", ".join(o.label for o in question.questions[1].options),
    }
    response = agent_pb2.UserQuestionResponse(question_id=question.question_id, answers=answers)
    client.send(agent_pb2.AgentRequest(question_response=response))
    [result] = await results(client)
    await client.wait_for("turn_complete")
    assert not result.is_error
    for asked, answer in answers.items():
        assert f'"{asked}"="{answer}"' in result.output


async def test_reminders_then_expiry_with_a_short_ttl(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client]
) -> None:
    daemon = await start_daemon(
        permissions=PermissionSettings(
            ttl_seconds=3, reminder_seconds=(0.5, 1.0), sweep_interval_seconds=0.1
        )
    )
    client = attach(daemon)
    client.say(BASH_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    reminders = [
        (await client.wait_for("permission_reminder", n)).permission_reminder for n in (1, 2)
    ]
    assert [r.request_id for r in reminders] == [request.request_id] * 2
    resolved = (await client.wait_for("permission_resolved")).permission_resolved
    assert resolved.outcome == "expired"
    expected = "Permission request expired after 3 seconds. User can retry the operation."
    assert resolved.message == expected
    [result] = await results(client)
    assert result.is_error
    assert expected in result.output
    await client.wait_for("turn_complete")  # a soft deny: the conversation goes on
    assert len(client.of_kind("permission_reminder")) == 2


async def test_answers_from_another_terminal_and_duplicate_answers(
    start_daemon: StartDaemon, attach: Callable[[InProcessDaemon], Client], workspace: Workspace
) -> None:
    daemon = await start_daemon()
    client = attach(daemon)
    client.say(BASH_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request
    pending = await betcode(daemon.socket, workspace.repo, "permissions", "pending", "--json")
    assert pending.code == 0
    [listed] = json.loads(pending.out)
    assert (listed["request_id"], listed["tool_name"]) == (request.request_id, "Bash")
    assert listed["input"]["command"] == HELLO

    denied = await betcode(
        daemon.socket,
        workspace.repo,
        *("permissions", "deny", request.request_id, "--message", "from elsewhere"),
    )
    assert (denied.code, denied.out.strip()) == (0, f"{request.request_id}: denied")
    [result] = await results(client)
    assert "from elsewhere" in result.output
    # The session's own client answers too late: first answer wins, nothing changes.
    client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    await client.wait_for("turn_complete")
    assert len(client.of_kind("permission_resolved")) == 1
    assert client.of_kind("error") == []
    none_left = await betcode(daemon.socket, workspace.repo, "permissions", "pending")
    assert (none_left.code, none_left.out.strip()) == (0, "No permission requests are waiting.")
    unknown = await betcode(
        daemon.socket, workspace.repo, "permissions", "allow", "no-such-request"
    )
    assert unknown.code == 6
    assert "no-such-request" in unknown.err


@pytest.mark.parametrize(
    "args", [["pending"], ["allow", "r1"], ["deny", "r1", "--message", "no"]], ids=str
)
def test_the_commands_exit_2_when_no_daemon_listens(tmp_path: Path, args: list[str]) -> None:
    socket = tmp_path / "nobody.sock"
    result = CliRunner().invoke(cli, ["permissions", *args, "--socket", str(socket)])
    assert result.exit_code == 2
    assert f"no daemon socket at {socket}" in result.output


async def test_two_parallel_read_only_requests_wait_together_and_are_answered_in_any_order(
    start_daemon: StartDaemon,
    attach: Callable[[InProcessDaemon], Client],
    mock_api: MockAnthropic,
    workspace: Workspace,
) -> None:
    outside = workspace.root / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("alpha-content\n")
    (outside / "b.txt").write_text("beta-content\n")
    reads = tuple(ToolUseBlock("Read", {"file_path": str(outside / n)}) for n in ("a.txt", "b.txt"))
    mock_api.enqueue(Reply(blocks=reads))
    daemon = await start_daemon()
    client = attach(daemon)
    client.say("read both files")
    await client.wait_for("permission_request", 2)  # both outstanding before any answer
    first, second = (e.permission_request for e in client.of_kind("permission_request"))
    file_path = first.input["file_path"]
    assert isinstance(file_path, str), file_path
    assert file_path.endswith("a.txt")
    client.answer(second.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    client.answer(first.request_id, Decision.PERMISSION_DECISION_DENY, "not that one")
    done = await results(client, 2)
    await client.wait_for("turn_complete")
    by_error = {result.is_error: result.output for result in done}
    assert "beta-content" in by_error[False]
    assert "not that one" in by_error[True]
