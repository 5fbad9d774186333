"""The chat's palette driven by Pilot: `/` commands from the daemon's real CommandService (on a
real project folder) filtered as typed, Tab to accept, `@` paths, and the commands the chat runs
itself (/compact, /model, /clear) next to those it sends to claude as text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import chat_events as ev
import grpc.aio
import pytest
from chat_fake_daemon import SESSION_ID, FakeAgentService, serve
from chat_pilot import transcript, until
from harness.session_directories import SessionsInMemory
from textual.pilot import Pilot

from betcode.cli.chat.app import ChatApp
from betcode.cli.chat.widgets import PromptArea, Suggestions
from betcode.cli.connection import DaemonClient
from betcode.cli.conversation import ConversationStream
from betcode.commands.catalog import CommandCatalog
from betcode.protocol.messages import SystemInit
from betcode.server.app import RpcService
from betcode.server.command_service import CommandService
from betcode.v1 import commands_pb2


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".claude" / "commands").mkdir(parents=True)
    (root / ".claude" / "commands" / "review-pr.md").write_text(
        "---\ndescription: Review the open pull request\n---\nReview it.\n"
    )
    (root / ".claude" / "agents").mkdir()
    (root / ".claude" / "agents" / "reviewer.md").write_text(
        "---\nname: code-reviewer\ndescription: Reviews diffs\n---\n"
    )
    (root / "src" / "app").mkdir(parents=True)
    (root / "src" / "app" / "main.py").write_text("print()\n")
    (root / "src" / "app" / "models.py").write_text("x\n")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_text("x")
    (root / ".gitignore").write_text("build/\n")
    return root


@pytest.fixture
async def server(
    fake: FakeAgentService, socket_path: Path, project: Path, tmp_path: Path
) -> AsyncIterator[grpc.aio.Server]:
    sessions = SessionsInMemory()
    sessions.active(SESSION_ID, project)

    async def claude_init(session_id: str | None) -> SystemInit:
        return SystemInit(slash_commands=["compact", "context", "cost", "review-pr"])

    catalog = CommandCatalog(tmp_path / "home" / ".claude", claude_init)
    commands = RpcService(
        commands_pb2.DESCRIPTOR.services_by_name["CommandService"],
        CommandService(sessions, catalog),
    )
    server = await serve(fake, socket_path, also=[commands])
    yield server
    await server.stop(grace=0)


def make_app(client: DaemonClient, project: Path) -> ChatApp:
    stream = ConversationStream(client, session_id=SESSION_ID, working_directory=str(project))
    return ChatApp(client, stream)


def shown(app: ChatApp) -> list[str]:
    """The suggestions on screen: each option's first word (the command or path)."""
    view = app.query_one(Suggestions)
    if not view.display:
        return []
    return [
        str(view.get_option_at_index(i).prompt).split("  ")[0] for i in range(view.option_count)
    ]


def described(app: ChatApp) -> dict[str, str]:
    view = app.query_one(Suggestions)
    pairs = (str(view.get_option_at_index(i).prompt) for i in range(view.option_count))
    return {label: text.strip() for label, _, text in (p.partition("  ") for p in pairs)}


async def typed(pilot: Pilot[None], app: ChatApp, text: str) -> None:
    await pilot.press(*text)
    prompt = app.query_one(PromptArea)
    await until(pilot, lambda: prompt.text.endswith(text), f"{text!r} typed")


async def test_slash_shows_commands_with_descriptions_filtered_as_typed(
    client: DaemonClient, fake: FakeAgentService, project: Path
) -> None:
    app = make_app(client, project)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        await typed(pilot, app, "/")
        await until(pilot, lambda: "/review-pr" in shown(app), "the registry shown")
        descriptions = described(app)
        assert descriptions["/compact"].startswith("Compact the conversation")
        assert descriptions["/review-pr"] == "Review the open pull request  (project)"
        assert descriptions["/model"].startswith("NAME  Switch")
        assert "/context" in descriptions  # claude's own, from its system/init

        await typed(pilot, app, "co")
        await until(
            pilot, lambda: shown(app) == ["/compact", "/context", "/cost"], "filtered to co"
        )
        await pilot.press("down")
        await pilot.press("tab")
        prompt = app.query_one(PromptArea)
        await until(pilot, lambda: prompt.text == "/context ", "the second one accepted")
        await until(pilot, lambda: shown(app) == [], "the list closed after the name")

        prompt.clear()
        await typed(pilot, app, "/rev")
        await until(pilot, lambda: shown(app) == ["/review-pr"], "filtered to rev")
        await pilot.press("escape")
        await until(pilot, lambda: shown(app) == [], "escape closed the list")
        await pilot.press("tab")  # with the list closed, Tab does not complete
        assert prompt.text == "/rev"


async def test_at_completes_paths_folder_by_folder_and_sends_them(
    client: DaemonClient, fake: FakeAgentService, project: Path
) -> None:
    app = make_app(client, project)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        prompt = app.query_one(PromptArea)
        await typed(pilot, app, "look at @sr")
        await until(pilot, lambda: shown(app)[:1] == ["@src/"], "the folder suggested")
        await pilot.press("tab")
        await until(pilot, lambda: prompt.text == "look at @src/", "the folder accepted")
        await until(pilot, lambda: shown(app)[:1] == ["@src/app/"], "its entries suggested")
        await pilot.press("tab")
        await typed(pilot, app, "ma")
        await until(pilot, lambda: shown(app) == ["@src/app/main.py"], "the file suggested")
        await pilot.press("tab")
        await until(pilot, lambda: prompt.text == "look at @src/app/main.py ", "file accepted")
        await typed(pilot, app, "please")
        await pilot.press("enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "look at @src/app/main.py please"

        await typed(pilot, app, "ask @rev")  # paths first, then agents
        await until(
            pilot,
            lambda: (
                shown(app)
                == [
                    "@.claude/agents/reviewer.md",
                    "@.claude/commands/review-pr.md",
                    "@agent-code-reviewer",
                ]
            ),
            "the agent file and the agent suggested",
        )
        prompt.clear()
        await typed(pilot, app, "ask @agent-rev")  # an agent, mentioned as Claude Code does
        await until(pilot, lambda: shown(app) == ["@agent-code-reviewer"], "the agent suggested")
        await pilot.press("tab")
        await until(pilot, lambda: prompt.text == "ask @agent-code-reviewer ", "agent accepted")
        prompt.clear()
        await typed(pilot, app, "@bui")  # ignored by .gitignore: nothing to suggest
        await pilot.pause(0.3)
        assert shown(app) == []
        prompt.clear()
        await typed(pilot, app, "@../")  # outside the session's tree: refused, nothing shown
        await pilot.pause(0.3)
        assert shown(app) == []


async def test_compact_model_and_unknown_commands(
    client: DaemonClient, fake: FakeAgentService, project: Path
) -> None:
    app = make_app(client, project)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        prompt = app.query_one(PromptArea)
        await typed(pilot, app, "/compact")
        await pilot.press("enter")
        await until(pilot, lambda: "CompactSession" in dict(fake.unary), "CompactSession")
        assert dict(fake.unary)["CompactSession"].session_id == SESSION_ID
        await until(pilot, lambda: prompt.text == "", "the input cleared")

        await typed(pilot, app, "/model sonnet")
        await pilot.press("enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "/model sonnet"  # claude switches itself
        assert app.stream.model == "sonnet"

        await typed(pilot, app, "/model")
        await pilot.press("enter")
        await until(pilot, lambda: prompt.text == "", "the input cleared")
        await typed(pilot, app, "/frobnicate now")  # not a command: claude reads it as text
        await pilot.press("enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "/frobnicate now"
        await typed(pilot, app, "/review-pr 12")  # a custom command: claude expands it
        await pilot.press("enter")
        sent = await fake.next_request("message")
        assert sent.message.content == "/review-pr 12"


async def test_clear_starts_a_fresh_session_in_the_same_directory(
    client: DaemonClient, fake: FakeAgentService, project: Path
) -> None:
    app = make_app(client, project)
    async with app.run_test() as pilot:
        await fake.wait_attached()
        fake.publish(ev.user_input("old question"), ev.text("old answer", complete=True))
        await until(pilot, lambda: len(transcript(app)) == 2, "the old conversation shown")
        fake.log.clear()  # the fake keeps one log: the new session's starts empty
        await typed(pilot, app, "/clear")
        await pilot.press("enter")
        await fake.wait_attached()
        _client_id, start = fake.starts[-1]
        assert start.working_directory == str(project)
        assert fake.created == {start.session_id}  # a new session, with an id the chat chose
        assert start.from_sequence == 0
        await until(pilot, lambda: transcript(app) == [], "the transcript emptied")
