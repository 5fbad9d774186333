"""Path completion on real trees: a git work tree (.gitignore via git itself), a plain folder
(.gitignore read by the walker), ranking, freshness, and queries that try to leave the tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from betcode.commands.path_index import build_index, check_inside, details, is_stale
from betcode.commands.path_query import PathQueryError, clamp_results, normalize_query, rank

FILES = (
    "README.md",
    "src/app/main.py",
    "src/app/models.py",
    "src/lib/util.py",
    "docs/guide.md",
    "build/out.bin",
    "debug.log",
    "notes/keep.log",
)
GITIGNORE = "build/\n*.log\n!notes/keep.log\n"


def make_tree(root: Path) -> Path:
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    (root / ".gitignore").write_text(GITIGNORE)
    (root / "src" / "lib" / ".gitignore").write_text("generated_*\n")
    (root / "src" / "lib" / "generated_api.py").write_text("x")
    return root.resolve()


def git(root: Path, *args: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_tree(tmp_path / "repo")
    git(root, "init", "-q")
    git(root, "add", "README.md", "src/app/main.py")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return root


EXPECTED = {
    ".gitignore",
    "README.md",
    "docs",
    "docs/guide.md",
    "notes",
    "notes/keep.log",
    "src",
    "src/app",
    "src/app/main.py",
    "src/app/models.py",
    "src/lib",
    "src/lib/.gitignore",
    "src/lib/util.py",
}


def test_git_tree_lists_tracked_and_untracked_but_not_ignored(repo: Path) -> None:
    index = build_index(repo)
    assert index.from_git
    assert index.complete
    assert {entry.path for entry in index.paths} == EXPECTED


def test_plain_folder_reads_every_gitignore_on_the_way(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "plain")
    (root / ".git").mkdir()  # a stray .git folder (not a repository) is never listed
    (root / ".git" / "HEAD").write_text("x")
    index = build_index(root)
    assert not index.from_git
    assert index.complete
    assert {entry.path for entry in index.paths} == EXPECTED


def test_ranking_prefix_then_name_then_substring(repo: Path) -> None:
    paths = build_index(repo).paths
    assert rank(paths, "", 4) == [".gitignore", "README.md", "docs", "notes"]
    assert rank(paths, "src/app/", 10) == ["src/app/main.py", "src/app/models.py"]
    assert rank(paths, "src/a", 2) == ["src/app", "src/app/main.py"]
    assert rank(paths, "mo", 10) == ["src/app/models.py"]  # a file name starting with it
    assert rank(paths, "util", 10) == ["src/lib/util.py"]
    assert rank(paths, "IDE", 10) == ["docs/guide.md"]  # contained, any case
    assert rank(paths, "nothing-like-it", 10) == []


@pytest.mark.parametrize(
    ("query", "normalized"),
    [("", ""), ("./src/", "src/"), ("src//app", "src/app"), ("./", ""), ("a b", "a b")],
)
def test_queries_are_normalized(query: str, normalized: str) -> None:
    assert normalize_query(query) == normalized


@pytest.mark.parametrize("query", ["/etc/passwd", "~/secrets", "../other", "src/../../x", "a\0b"])
def test_queries_leaving_the_tree_are_refused(query: str) -> None:
    with pytest.raises(PathQueryError):
        normalize_query(query)


def test_a_symlink_leading_out_is_listed_but_never_entered(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (repo / "escape").symlink_to(outside)
    (repo / "inner").symlink_to(repo / "src")
    index = build_index(repo)
    names = {entry.path for entry in index.paths}
    assert {"escape", "inner"} <= names
    assert not any(name.startswith("escape/") for name in names)
    found = details(repo, "escape")
    assert found is not None
    assert found.kind == "symlink"
    with pytest.raises(PathQueryError, match="leads outside"):
        check_inside(repo, "escape/sec")
    check_inside(repo, "inner/app")  # a symlink that stays inside is fine


def test_details_report_kind_size_and_mtime(repo: Path) -> None:
    found = details(repo, "src/app/main.py")
    assert found is not None
    assert (found.kind, found.size) == ("file", len("src/app/main.py"))
    assert found.modified_at > 0
    folder = details(repo, "src")
    assert folder is not None
    assert folder.kind == "directory"
    assert details(repo, "gone.txt") is None


def test_changes_make_the_index_stale(repo: Path) -> None:
    index = build_index(repo)
    assert not is_stale(index)
    (repo / "src" / "app" / "new.py").write_text("x")
    assert is_stale(index)
    index = build_index(repo)
    assert "src/app/new.py" in {entry.path for entry in index.paths}
    (repo / ".gitignore").write_text(GITIGNORE + "docs/\n")
    assert is_stale(index)


def test_result_count_is_bounded() -> None:
    assert clamp_results(0) == 50
    assert clamp_results(5) == 5
    assert clamp_results(10**6) == 1000
