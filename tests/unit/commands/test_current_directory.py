"""Where a CommandService call without session_id works: the most recently active session's
directory, or where `cd` pinned it inside some session's tree; every `cd` that would leave the
sessions' trees is refused and changes nothing. Real folders and symlinks, sessions in memory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness.session_directories import SessionsInMemory

from betcode.commands.current_directory import (
    MAX_ARGUMENT_CHARS,
    BadDirectory,
    CurrentDirectory,
    DirectoryNotAllowed,
    NoCurrentDirectory,
    Place,
    requested_folder,
    session_place,
    within,
)

HERE = Path("/work/project")


@pytest.mark.parametrize(
    ("argument", "current", "wanted"),
    [
        ("", HERE, None),  # `cd` alone (the upstream CLI sends "~" for it): unpin
        ("~", HERE, None),
        ("~", None, None),
        ("src/app", HERE, HERE / "src/app"),
        ("..", HERE, HERE / ".."),  # resolved (and checked) later
        ("/srv/other", HERE, Path("/srv/other")),
        ("/srv/other", None, Path("/srv/other")),
    ],
)
def test_requested_folder(argument: str, current: Path | None, wanted: Path | None) -> None:
    assert requested_folder(argument, current) == wanted


@pytest.mark.parametrize(
    ("argument", "refusal"),
    [
        ("~/project", "give an absolute path or one relative"),
        ("~alice", "give an absolute path or one relative"),
        ("src\nrm", "control characters"),
        ("a" * (MAX_ARGUMENT_CHARS + 1), f"at most {MAX_ARGUMENT_CHARS}"),
    ],
)
def test_requested_folder_refuses_what_names_no_folder(argument: str, refusal: str) -> None:
    with pytest.raises(BadDirectory, match=refusal):
        requested_folder(argument, HERE)


def test_a_relative_folder_needs_a_current_directory() -> None:
    with pytest.raises(NoCurrentDirectory, match="start a session, or send session_id"):
        requested_folder("src", None)


@pytest.mark.parametrize(
    ("path", "root", "inside"),
    [
        ("/p", "/p", True),
        ("/p/src/app", "/p", True),
        ("/p2", "/p", False),  # a sibling sharing the prefix is not inside
        ("/", "/p", False),
        ("/p/src", "/", True),
    ],
)
def test_within(path: str, root: str, inside: bool) -> None:
    assert within(Path(path), Path(root)) is inside


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    """project/ (src/app, docs, a file, a symlink out), other/, outside/ — all resolved."""
    root = tmp_path.resolve()
    for folder in ("project/src/app", "project/docs", "other/lib", "outside/secret"):
        (root / folder).mkdir(parents=True)
    (root / "project" / "README.md").write_text("x")
    (root / "project" / "escape").symlink_to(root / "outside")
    return root


@pytest.fixture
def sessions() -> SessionsInMemory:
    return SessionsInMemory()


@pytest.fixture
def current(sessions: SessionsInMemory) -> CurrentDirectory:
    return CurrentDirectory(sessions)


async def test_without_any_session_there_is_no_current_directory(
    current: CurrentDirectory, trees: Path
) -> None:
    with pytest.raises(NoCurrentDirectory):
        await current.place()
    with pytest.raises(NoCurrentDirectory):
        await current.change("src")
    with pytest.raises(DirectoryNotAllowed):
        await current.change(str(trees / "project"))


async def test_it_follows_the_most_recently_active_session(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    sessions.active("a", trees / "project")
    assert await current.place() == Place("a", trees / "project")
    sessions.active("b", trees / "other")
    assert await current.place() == Place("b", trees / "other")
    sessions.active("a")
    assert await current.place() == Place("a", trees / "project")


async def test_a_session_directory_is_resolved(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    (trees / "link-to-project").symlink_to(trees / "project")
    sessions.active("a", trees / "link-to-project")
    assert await current.place() == Place("a", trees / "project")
    assert await session_place(sessions, "a") == Place("a", trees / "project")
    assert await session_place(sessions, "no-such-session") is None


async def test_cd_pins_it_inside_the_tree_until_cd_alone(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    project = trees / "project"
    sessions.active("a", project)
    assert await current.change("src") == Place("a", project / "src")
    assert await current.change("app") == Place("a", project / "src" / "app")
    assert await current.change("../../docs") == Place("a", project / "docs")
    assert await current.change("..") == Place("a", project)
    assert await current.change(str(project / "src")) == Place("a", project / "src")
    sessions.active("b", trees / "other")  # a newer session does not move a pinned directory
    assert await current.place() == Place("a", project / "src")
    for unpin in ("~", ""):
        await current.change(str(project / "docs"))
        assert await current.change(unpin) == Place("b", trees / "other")
        assert await current.place() == Place("b", trees / "other")


async def test_cd_into_another_session_tree_works_for_that_session(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    sessions.active("outer", trees)
    sessions.active("inner", trees / "other")
    sessions.active("a", trees / "project")
    # The nearest session above the folder is the one it is worked in for.
    assert await current.change(str(trees / "other" / "lib")) == Place(
        "inner", trees / "other" / "lib"
    )
    assert await current.change("../..") == Place("outer", trees)


@pytest.mark.parametrize(
    "argument",
    [
        "..",  # above the session's directory
        "../outside",
        "escape",  # a symlink inside, to a folder outside
        "escape/secret",
        "src/../../outside",
        "/",
        "{trees}/outside",
        "{trees}/no-such-folder",  # outside: refused alike, existing or not
    ],
)
async def test_cd_out_of_every_session_tree_is_refused_and_changes_nothing(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path, argument: str
) -> None:
    sessions.active("a", trees / "project")
    await current.change(".")  # pinned at the session's directory
    sessions.active("b", trees / "other")
    with pytest.raises(DirectoryNotAllowed, match="outside the working directory of every"):
        await current.change(argument.format(trees=trees))
    assert await current.place() == Place("a", trees / "project")


@pytest.mark.parametrize(
    ("argument", "refusal"),
    [
        ("../README.md", "is not a folder"),
        ("../no-such-folder", "is not a folder"),
    ],
)
async def test_cd_to_no_folder_inside_is_refused_and_changes_nothing(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path, argument: str, refusal: str
) -> None:
    sessions.active("a", trees / "project")
    await current.change("docs")
    with pytest.raises(BadDirectory, match=refusal):
        await current.change(argument)
    assert await current.place() == Place("a", trees / "project" / "docs")


async def test_a_pin_lapses_with_its_session(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    sessions.active("a", trees / "project")
    sessions.active("b", trees / "other")
    await current.change(str(trees / "project" / "src"))
    sessions.delete("a")
    assert await current.place() == Place("b", trees / "other")


async def test_a_pin_lapses_with_its_folder(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    sessions.active("a", trees / "project")
    await current.change("src/app")
    shutil.rmtree(trees / "project" / "src")
    assert await current.place() == Place("a", trees / "project")


async def test_a_pin_lapses_when_its_folder_now_leads_out(
    current: CurrentDirectory, sessions: SessionsInMemory, trees: Path
) -> None:
    sessions.active("a", trees / "project")
    await current.change("docs")
    (trees / "project" / "docs").rmdir()
    (trees / "project" / "docs").symlink_to(trees / "outside")
    assert await current.place() == Place("a", trees / "project")
