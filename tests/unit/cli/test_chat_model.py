"""The chat's view-model, without Textual: AgentEvents in, blocks / prompts / status out."""

# The tests assert a state, change it through a method, and assert it again: mypy keeps the
# first assertion's narrowing across the call and takes what follows for unreachable.
# mypy: disable-error-code="unreachable, comparison-overlap"

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import chat_events as ev
import pytest

from betcode.cli.chat.actions import CtrlC, CtrlCPolicy, question_answers
from betcode.cli.chat.model import ChatModel
from betcode.cli.chat.state import (
    Activity,
    NoticeBlock,
    PermissionPrompt,
    QuestionPrompt,
    TextBlock,
    ToolBlock,
    UserBlock,
)
from betcode.cli.chat.texts import (
    SPINNER,
    expiry_text,
    result_preview,
    status_line,
    tool_summary,
)
from betcode.cli.chat.widgets import nested_activity, readable_input
from betcode.v1 import common_pb2

ME = "cli-me"


def fed(*events: ev.AgentEvent) -> ChatModel:
    model = ChatModel(ME)
    for event in events:
        model.apply(event)
    return model


def test_text_deltas_grow_one_block_until_a_tool_starts() -> None:
    model = fed(
        ev.user_input("list files"),
        ev.text("Let me "),
        ev.text("look."),
        ev.tool_start("t1", "Bash", {"command": "ls"}),
        ev.text("Done."),
    )
    user, first, tool, second = model.blocks.values()
    assert user == UserBlock(0, "list files")
    assert isinstance(first, TextBlock)
    assert (first.text, first.closed) == ("Let me look.", True)
    assert isinstance(tool, ToolBlock)
    assert (tool.name, tool.input, tool.done) == ("Bash", {"command": "ls"}, False)
    assert isinstance(second, TextBlock)
    assert (second.text, second.closed) == ("Done.", False)


def test_changes_name_only_what_moved() -> None:
    model = fed(ev.text("a"), ev.tool_start("t1", "Read", {"file_path": "x"}))
    changes = model.apply(ev.tool_result("t1", "contents"))
    assert (list(changes.blocks), changes.prompts, changes.status) == ([1], False, False)


def test_subagent_text_streams_into_its_own_block() -> None:
    model = fed(ev.text("top "), ev.text("inner", parent="task-1"), ev.text("level"))
    texts = [
        (b.text, b.parent_tool_use_id) if isinstance(b, TextBlock) else b
        for b in model.blocks.values()
    ]
    assert texts == [("top level", ""), ("inner", "task-1")]


def test_a_task_subagents_activity_is_drawn_inside_its_task_call_collapsed() -> None:
    model = fed(
        ev.text("Delegating.", complete=True),
        ev.tool_start("task-1", "Task", {"description": "look around", "prompt": "ls"}),
    )
    [task_key] = [k for k, b in model.blocks.items() if isinstance(b, ToolBlock)]
    inside = model.apply(ev.text("Listing files.", complete=True, parent="task-1"))
    assert list(inside.blocks) == [task_key]  # only the Task call is redrawn
    model.apply(ev.tool_start("b1", "Bash", {"command": "ls"}, parent="task-1"))
    redrawn = model.apply(ev.tool_result("b1", "a.txt", parent="task-1"))
    assert list(redrawn.blocks) == [task_key]
    model.apply(ev.tool_result("task-1", "Found a.txt"))

    task = model.blocks[task_key]
    assert isinstance(task, ToolBlock)
    assert [type(b).__name__ for b in task.nested] == ["TextBlock", "ToolBlock"]
    assert nested_activity(task.nested).plain == "  Listing files.\n  ✓ Bash(ls)"


def test_tool_result_completes_its_call_and_flags_errors() -> None:
    model = fed(
        ev.tool_start("t1", "Bash", {"command": "false"}),
        ev.tool_result("t1", "exit 1", is_error=True),
    )
    [tool] = model.blocks.values()
    assert isinstance(tool, ToolBlock)
    assert (tool.done, tool.output, tool.is_error) == (True, "exit 1", True)


def test_permission_prompt_is_one_per_request_id_even_when_replayed() -> None:
    request = ev.permission("req-1", "Bash", {"command": "rm x"}, tool_use_id="t1")
    replay = ev.permission("req-1", "Bash", {"command": "rm x"}, tool_use_id="t1")
    replay.permission_request.is_replay = True
    model = fed(request, replay)
    assert list(model.prompts) == ["req-1"]
    prompt = model.active_prompt
    assert isinstance(prompt, PermissionPrompt)
    assert (prompt.tool_name, prompt.input, prompt.decision_reason) == (
        "Bash",
        {"command": "rm x"},
        "no rule matched",
    )


@pytest.mark.parametrize(
    "settling",
    [
        ev.resolved("req-1", "allowed", by="cli-other"),
        ev.tool_result("t1", "ok"),
        ev.turn_complete(),
    ],
    ids=["resolved elsewhere", "its tool ran", "the turn ended"],
)
def test_settled_prompts_disappear(settling: ev.AgentEvent) -> None:
    model = fed(
        ev.tool_start("t1", "Bash", {"command": "ls"}),
        ev.permission("req-1", "Bash", {"command": "ls"}, tool_use_id="t1"),
    )
    changes = model.apply(settling)
    assert changes.prompts
    assert model.prompts == {}


def test_resolution_is_noted_in_the_transcript() -> None:
    model = fed(ev.permission("req-1", "Bash", {}), ev.resolved("req-1", "denied"))
    assert list(model.blocks.values())[-1] == NoticeBlock(0, "Bash: denied")


def test_resolution_of_an_answered_prompt_names_it_and_who_decided() -> None:
    model = fed(ev.permission("req-1", "Bash", {}), ev.question("q-1", ("Which?", ["A"], False)))
    model.answered("req-1")
    model.apply(ev.resolved("req-1", "allowed", by=ME))
    model.apply(ev.resolved("q-1", "answered", by="cli-phone"))
    model.apply(ev.resolved("req-unseen", "expired"))
    notices = [b.text for b in model.blocks.values() if isinstance(b, NoticeBlock)]
    assert notices == [
        "Bash: allowed by you",
        "question: answered by cli-phone",
        "request: expired",
    ]


def test_a_cancelled_turn_is_noted() -> None:
    cancelled = ev.turn_complete()
    cancelled.turn_complete.stop_reason = "cancelled"
    model = fed(ev.text("partial"), cancelled, ev.turn_complete())
    texts = [b if isinstance(b, ToolBlock) else b.text for b in model.blocks.values()]
    assert texts == ["partial", "Turn cancelled."]


def test_questions_keep_every_prompt() -> None:
    model = fed(ev.question("q-1", ("Which?", ["A", "B"], False), ("Also?", ["X", "Y"], True)))
    prompt = model.active_prompt
    assert isinstance(prompt, QuestionPrompt)
    assert [(q.text, q.multi_select) for q in prompt.questions] == [
        ("Which?", False),
        ("Also?", True),
    ]
    assert [c.answer for c in prompt.questions[1].choices] == ["X", "Y"]


def test_question_answers_join_picks_and_free_text() -> None:
    model = fed(ev.question("q-1", ("Which?", ["A", "B"], False), ("Also?", ["X", "Y"], True)))
    prompt = model.active_prompt
    assert isinstance(prompt, QuestionPrompt)
    single, multi = prompt.questions
    picks = [[single.choices[1]], [multi.choices[0], multi.choices[1]]]
    assert question_answers(prompt, picks, ["", ""]) == {"Which?": "B", "Also?": "X, Y"}
    assert question_answers(prompt, picks, [" mine ", "Z"]) == {
        "Which?": "mine",
        "Also?": "X, Y, Z",
    }


def test_status_follows_the_turn() -> None:
    model = fed(ev.session_info("sess-1", model="opus"), ev.status(ev.THINKING))
    assert (model.status.session_id, model.status.model) == ("sess-1", "opus")
    assert model.turn_running
    model.apply(ev.tool_start("t1", "Grep", {"pattern": "x"}))
    model.apply(ev.status(ev.EXECUTING_TOOL))
    assert "running Grep" in status_line(model.status)
    model.apply(ev.status(ev.WAITING))
    assert model.status.activity is Activity.WAITING_FOR_YOU
    model.apply(ev.status(ev.IDLE))
    assert not model.turn_running
    model.apply(ev.status(ev.CRASHED))
    assert model.status.activity is Activity.CRASHED


def test_usage_adds_up_over_turns() -> None:
    model = fed(ev.usage(100, 20, 0.01), ev.usage(50, 5, 0.002))
    assert (model.status.input_tokens, model.status.output_tokens) == (150, 25)
    assert model.status.cost_usd == pytest.approx(0.012)
    assert "175 tokens · $0.0120" in status_line(model.status)


def test_a_queued_message_shows_where_it_stands() -> None:
    model = fed(ev.status(common_pb2.AGENT_STATUS_QUEUED, "queued: 2 of 3 waiting"))
    assert model.status.activity is Activity.QUEUED
    assert "queued for a turn slot" in status_line(model.status)
    notices = [b.text for b in model.blocks.values() if isinstance(b, NoticeBlock)]
    assert notices == ["queued: 2 of 3 waiting"]


def test_the_status_bar_shows_the_worktree_branch() -> None:
    model = fed(ev.usage(1, 1, 0.0))
    assert "branch" not in status_line(model.status)
    model.status.branch = "feature-x"
    assert "│  branch feature-x  │" in status_line(model.status)


@pytest.mark.parametrize(
    ("holder", "read_only"),
    [(ME, False), ("cli-other", True), ("", False)],
    ids=["this client", "another client", "nobody"],
)
def test_input_lock_holder(holder: str, read_only: bool) -> None:
    model = fed(ev.input_lock(holder))
    assert model.status.read_only is read_only
    line = status_line(model.status)
    assert ("read-only: cli-other has the input lock; press ctrl+l" in line) is read_only
    assert ("input lock: you" in line) is (holder == ME)


def test_no_input_lock_error_makes_the_client_read_only() -> None:
    model = fed(ev.error("NO_INPUT_LOCK", "not yours", holder_client_id="cli-phone"))
    assert model.status.read_only
    assert model.status.lock_holder == "cli-phone"
    [notice] = model.blocks.values()
    assert isinstance(notice, NoticeBlock)
    assert notice.is_error


def test_lock_granted_ends_read_only() -> None:
    model = fed(ev.input_lock("cli-other"))
    model.lock_granted()
    assert not model.status.read_only


@pytest.mark.parametrize(
    ("presses", "expected"),
    [
        ([(0.0, True)], [CtrlC.CANCEL_TURN]),
        ([(0.0, False)], [CtrlC.QUIT]),
        ([(0.0, True), (1.5, True)], [CtrlC.CANCEL_TURN, CtrlC.QUIT]),
        ([(0.0, True), (5.0, True)], [CtrlC.CANCEL_TURN, CtrlC.CANCEL_TURN]),
    ],
    ids=["running", "idle", "twice quickly", "twice slowly"],
)
def test_ctrl_c(presses: list[tuple[float, bool]], expected: list[CtrlC]) -> None:
    policy = CtrlCPolicy(window=2.0)
    assert [policy.press(now, running) for now, running in presses] == expected


@pytest.mark.parametrize(
    ("name", "tool_input", "summary"),
    [
        ("Bash", {"command": "git  status\n--short"}, "git status --short"),
        ("Edit", {"file_path": "src/a.py", "old_string": "x"}, "src/a.py"),
        ("Custom", {"n": 1}, '{"n":1}'),
        ("Custom", {}, ""),
        ("Bash", {"command": "x" * 200}, "x" * 79 + "…"),
        (
            "AskUserQuestion",
            {"questions": [{"question": "Which DB?", "options": []}, {"question": "Why?"}]},
            "Which DB? · Why?",
        ),
    ],
)
def test_tool_summary(name: str, tool_input: dict[str, object], summary: str) -> None:
    assert tool_summary(name, tool_input) == summary


@pytest.mark.parametrize(
    ("output", "preview"),
    [
        ("made\n", "⎿ made"),
        ("", "⎿ (no output)"),
        ("1\n2\n3", "⎿ 1\n  2\n  3"),
        ("1\n2\n3\n4\n5\n", "⎿ 1\n  2\n  3\n  … +2 lines"),
    ],
    ids=["one line", "empty", "three lines", "more lines"],
)
def test_result_preview(output: str, preview: str) -> None:
    assert result_preview(output) == preview


def test_attached_to_a_new_session_is_ready() -> None:
    model = ChatModel(ME)
    assert model.status.activity is Activity.STARTING
    model.apply(ev.session_info("sess-1"))
    assert model.status.activity is Activity.IDLE
    model.apply(ev.status(ev.THINKING))
    model.apply(ev.session_info("sess-1"))  # a later SessionInfo does not hide the turn
    assert model.status.activity is Activity.THINKING


def test_an_edited_input_replaces_the_one_the_tool_call_shows() -> None:
    model = fed(
        ev.tool_start("toolu_1", "Bash", {"command": "rm -rf build"}),
        ev.permission("req-1", "Bash", {"command": "rm -rf build"}, tool_use_id="toolu_1"),
    )
    [tool] = model.blocks.values()
    changes = model.answered("req-1", {"command": "rm -rf build/tmp"})
    assert isinstance(tool, ToolBlock)
    assert tool.input == {"command": "rm -rf build/tmp"}
    assert list(changes.blocks) == [tool.key]
    assert not model.prompts


RM = {"command": "rm -rf build"}
EDITED = {"command": "rm -rf build/tmp"}


def test_an_input_edited_elsewhere_replaces_the_one_the_tool_call_shows() -> None:
    # Live from another terminal, or replayed from history: the same events.
    model = fed(
        ev.tool_start("toolu_1", "Bash", RM),
        ev.permission("req-1", "Bash", RM, tool_use_id="toolu_1"),
    )
    [tool] = model.blocks.values()
    changes = model.apply(ev.resolved("req-1", "allowed", by="cli:bob@laptop:7-ab", edited=EDITED))
    assert isinstance(tool, ToolBlock)
    assert tool.input == EDITED
    assert tool.key in changes.blocks
    notice = list(model.blocks.values())[-1]
    assert notice == NoticeBlock(1, "Bash: allowed with an edited input by bob@laptop")


def test_a_resolution_without_an_edit_leaves_the_input() -> None:
    model = fed(
        ev.tool_start("toolu_1", "Bash", RM),
        ev.permission("req-1", "Bash", RM, tool_use_id="toolu_1"),
        ev.resolved("req-1", "allowed", by="cli:bob@laptop:7-ab"),
    )
    tool = model.blocks[0]
    assert isinstance(tool, ToolBlock)
    assert tool.input == RM


SELF = "cli:ann@desk:100-aaaaaaaa"


@pytest.mark.parametrize(
    ("decided_by", "shown"),
    [
        (SELF, "Bash: allowed by you"),
        ("cli:ann@desk:99-bbbbbbbb", "Bash: allowed by you"),  # an earlier terminal of mine
        ("cli:ann@laptop:100-aaaaaaaa", "Bash: allowed by ann@laptop"),
        ("cli:bob@desk:5-cccccccc", "Bash: allowed by bob@desk"),
        ("cli-desk-1234-abcdef", "Bash: allowed by cli-desk-1234-abcdef"),  # an older id
        ("flutter-phone", "Bash: allowed by flutter-phone"),
    ],
)
def test_who_decided_is_named_by_user_and_host(decided_by: str, shown: str) -> None:
    model = ChatModel(SELF)
    model.apply(ev.permission("req-1", "Bash", {}))
    model.apply(ev.resolved("req-1", "allowed", by=decided_by))
    assert list(model.blocks.values())[-1] == NoticeBlock(0, shown)


@pytest.mark.parametrize(
    ("holder", "shown"),
    [("cli:ann@desk:99-bbbbbbbb", "you, in another terminal"), ("cli:bob@desk:5-c", "bob@desk")],
)
def test_the_lock_holder_is_named_by_user_and_host(holder: str, shown: str) -> None:
    model = ChatModel(SELF)
    model.apply(ev.input_lock(holder))
    assert model.status.read_only
    assert f"read-only: {shown} has the input lock" in status_line(model.status)
    refused = ChatModel(SELF)
    refused.apply(ev.error("NO_INPUT_LOCK", "not yours", holder_client_id=holder))
    assert refused.status.lock_holder == shown


NOW = datetime(2026, 11, 22, 1, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("left", "span"),
    [
        (timedelta(days=7), "7 d"),
        (timedelta(days=6, hours=23, minutes=59), "6 d 23 h"),
        (timedelta(hours=2, minutes=5), "2 h 5 min"),
        (timedelta(seconds=90), "1 min 30 s"),
        (timedelta(seconds=-5), "0 min 0 s"),
    ],
)
def test_expiry_text(left: timedelta, span: str) -> None:
    naive_utc = (NOW + left).replace(tzinfo=None)  # as protobuf's ToDatetime gives it
    text = expiry_text(naive_utc, NOW)
    assert text == f"{NOW + left:%Y-%m-%d %H:%M} UTC (in {span}), then it is denied"


@pytest.mark.parametrize(
    ("tool_input", "shown"),
    [
        ({"command": "ls -la", "timeout": 5}, "command: ls -la\ntimeout: 5"),
        (
            {"command": "for f in *; do\n  echo $f\ndone"},
            "command:\n  for f in *; do\n    echo $f\n  done",
        ),
        ({"file_path": "a.py", "content": "x = 1\n"}, "file_path: a.py\ncontent:\n  x = 1"),
        ({"todos": [{"id": 1}]}, 'todos: [{"id": 1}]'),
        ({"markup": "[red]not a style[/red]"}, "markup: [red]not a style[/red]"),
    ],
    ids=["plain", "multi-line command", "file content", "not text", "no markup"],
)
def test_readable_input(tool_input: dict[str, object], shown: str) -> None:
    assert readable_input(tool_input).plain == shown


def test_an_edit_reads_as_removed_and_added_lines() -> None:
    edit = {"file_path": "a.py", "old_string": "x = 1\ny = 2", "new_string": "x = 3"}
    shown = readable_input({**edit, "replace_all": False})
    head = ["file_path: a.py", "replace_all: false", "change:"]
    assert shown.plain == "\n".join([*head, "  - x = 1", "  - y = 2", "  + x = 3"])
    styles = {shown.plain[span.start : span.end].strip(): str(span.style) for span in shown.spans}
    assert styles == {"- x = 1": "red", "- y = 2": "red", "+ x = 3": "green"}


def test_the_spinner_goes_before_the_activity() -> None:
    model = fed(ev.session_info("sess-1"), ev.status(ev.THINKING))
    assert f"│  {SPINNER[3]} thinking  │" in status_line(model.status, SPINNER[3])
    assert "│  thinking  │" in status_line(model.status)
