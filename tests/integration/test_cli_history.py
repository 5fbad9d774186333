"""`betcode sessions show --transcript`, `sessions export` and `sessions search` with the real
CLI (pinned claude against the mock model): what was said is read back from the store
without attaching, and the search index follows deletes and survives daemon restarts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from harness.cli_process import betcode
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace
from harness.restarts import Restarts

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

ZEBRA_PROMPT = 'SCN:plain {"text": "Zebras cross the road at noon."} where do zebras go?'
OKAPI_PROMPT = 'SCN:plain {"text": "Okapis hide in the forest."} and the okapi?'


async def run_turn(socket: Path, cwd: Path, prompt: str) -> str:
    done = await betcode(socket, cwd, "run", prompt, "--output", "json")
    assert done.code == 0, done.err
    return str(json.loads(done.out)["session_id"])


async def test_transcript_and_exports_read_the_store_without_the_input_lock(
    daemon: InProcessDaemon, workspace: Workspace, clients: Callable[[str], Client]
) -> None:
    socket, repo = daemon.socket, workspace.repo
    holder = clients("holder")  # a chat typing in the session: it holds the input lock
    holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    await holder.wait_for("session_info")
    holder.say(ZEBRA_PROMPT)
    await holder.wait_for("turn_complete")
    session_id = holder.session_id
    locks = [e.input_lock for e in holder.of_kind("input_lock")]
    assert locks
    assert locks[-1].holder_client_id == "holder"

    shown = await betcode(socket, repo, "sessions", "show", session_id[:8], "--transcript")
    assert shown.code == 0, shown.err
    assert f"## You · \n\n{ZEBRA_PROMPT}" not in shown.out  # the time follows the dot
    assert "where do zebras go?" in shown.out
    assert "## Claude · " in shown.out
    assert "Zebras cross the road at noon." in shown.out

    exported = await betcode(socket, repo, "sessions", "export", session_id, "--format", "json")
    data = json.loads(exported.out)
    assert data["session"]["id"] == session_id
    said = [(e["role"], e["text"]) for e in data["entries"] if e["role"] in ("user", "assistant")]
    assert said == [("user", ZEBRA_PROMPT), ("assistant", "Zebras cross the road at noon.")]

    lines = await betcode(socket, repo, "sessions", "export", session_id, "--format", "ndjson")
    events = [json.loads(line) for line in lines.out.splitlines()]
    assert [int(e["sequence"]) for e in events] == list(range(1, len(events) + 1))
    assert any(e.get("user_input", {}).get("content") == ZEBRA_PROMPT for e in events)

    markdown = await betcode(socket, repo, "sessions", "export", session_id, "-o", "t.md")
    assert markdown.code == 0
    assert "Zebras cross the road at noon." in (repo / "t.md").read_text()

    # Reading asked nothing of the holder and took nothing from it.
    assert [e.input_lock for e in holder.of_kind("input_lock")] == locks
    assert holder.of_kind("input_lock_requested") == []


async def test_search_finds_words_in_both_sides_with_session_time_and_snippet(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = daemon.socket, workspace.repo
    zebra = await run_turn(socket, repo, ZEBRA_PROMPT)
    okapi = await run_turn(socket, repo, OKAPI_PROMPT)
    await betcode(socket, repo, "sessions", "rename", okapi, "forest")

    found = json.loads((await betcode(socket, repo, "sessions", "search", "zebras", "--json")).out)
    assert {(h["session_id"], h["role"]) for h in found} == {
        (zebra, "user"),
        (zebra, "assistant"),
    }
    assert all("[Zebras]" in h["snippet"] or "[zebras]" in h["snippet"] for h in found)
    assert all(h["created_at"] > 0 for h in found)

    text = await betcode(socket, repo, "sessions", "search", "okapi*", "forest")
    header, *rows = text.out.splitlines()
    assert header.split() == ["SESSION", "NAME", "TIME", "WHO", "MESSAGE"]
    assert sorted(row.split()[4] for row in rows) == ["assistant", "user"]  # prompt and reply
    assert all(row.startswith(f"{okapi[:8]}  forest  ") for row in rows)
    assert any(row.endswith("assistant  [Okapis] hide in the [forest].") for row in rows)

    only = await betcode(socket, repo, "sessions", "search", "zebras", "--session", "forest")
    assert only.out == "No messages match.\n"
    odd = await betcode(socket, repo, "sessions", "search", 'zeb"ra OR (', "--json")
    assert (odd.code, json.loads(odd.out)) == (0, [])  # FTS syntax is never interpreted
    unknown = await betcode(socket, repo, "sessions", "search", "zebras", "--session", "nope")
    assert unknown.code == 6


@pytest.fixture
async def restarts(tmp_path: Path) -> AsyncIterator[Restarts]:
    made = Restarts(tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def test_search_follows_deletes_and_survives_a_restart(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    socket, repo = daemon.socket, workspace.repo
    zebra = await run_turn(socket, repo, ZEBRA_PROMPT)
    okapi = await run_turn(socket, repo, OKAPI_PROMPT.replace("okapi?", "zebras or okapi?"))

    async def sessions_found(*words: str) -> set[str]:
        done = await betcode(socket, repo, "sessions", "search", *words, "--json")
        assert done.code == 0, done.err
        return {hit["session_id"] for hit in json.loads(done.out)}

    assert await sessions_found("zebras") == {zebra, okapi}
    assert (await betcode(socket, repo, "sessions", "delete", zebra, "--yes")).code == 0
    assert await sessions_found("zebras") == {okapi}
    assert daemon.stop() == 0
    await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    assert await sessions_found("zebras") == {okapi}
    assert await sessions_found("okapis") == {okapi}
