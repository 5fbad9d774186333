"""Finding the claude binary: flag, env, PATH, pinned — in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from betcode.claude.locate import (
    CLAUDE_BIN_ENV,
    BinarySource,
    ClaudeNotFound,
    find_claude_binary,
    pinned_candidates,
    platform_package_name,
)


def _executable(path: Path, body: str = "#!/bin/sh\necho '9.9.9 (Claude Code)'\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "project"
    return {
        "flag": _executable(tmp_path / "flag" / "claude"),
        "env": _executable(tmp_path / "env" / "claude"),
        "path": _executable(tmp_path / "bin" / "claude"),
        "pinned": _executable(pinned_candidates(root)[0]),
        "root": root,
    }


def _find(places: dict[str, Path], *, flag: bool, env: bool, path: bool) -> tuple[Path, str]:
    environ = {"PATH": str(places["path"].parent) if path else "/nonexistent"}
    if env:
        environ[CLAUDE_BIN_ENV] = str(places["env"])
    found = find_claude_binary(
        str(places["flag"]) if flag else None, environ, project_root=places["root"]
    )
    return found.path, found.source.value


@pytest.mark.parametrize(
    ("flag", "env", "path", "winner"),
    [
        (True, True, True, "flag"),
        (False, True, True, "env"),
        (False, False, True, "path"),
        (False, False, False, "pinned"),
    ],
)
def test_order(places: dict[str, Path], flag: bool, env: bool, path: bool, winner: str) -> None:
    assert _find(places, flag=flag, env=env, path=path) == (places[winner], winner)


def test_platform_package_is_the_fallback_for_the_pinned_launcher(tmp_path: Path) -> None:
    native = _executable(pinned_candidates(tmp_path)[1])
    found = find_claude_binary(None, {"PATH": ""}, project_root=tmp_path)
    assert (found.path, found.source) == (native, BinarySource.PINNED)


def test_nothing_found_lists_what_was_tried(tmp_path: Path) -> None:
    with pytest.raises(ClaudeNotFound) as caught:
        find_claude_binary(None, {"PATH": str(tmp_path)}, project_root=tmp_path)
    message = str(caught.value)
    for expected in (
        "--claude-bin",
        CLAUDE_BIN_ENV,
        "PATH",
        *map(str, pinned_candidates(tmp_path)),
    ):
        assert expected in message


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_named_binary_that_is_missing_is_an_error_not_a_fallback(
    places: dict[str, Path], how: str, tmp_path: Path
) -> None:
    missing = str(tmp_path / "nope" / "claude")
    environ = {"PATH": str(places["path"].parent)}
    if how == "env":
        environ[CLAUDE_BIN_ENV] = missing
    with pytest.raises(ClaudeNotFound, match="does not exist"):
        find_claude_binary(missing if how == "flag" else None, environ, project_root=places["root"])


def test_a_named_file_that_is_not_executable_is_an_error(tmp_path: Path) -> None:
    plain = tmp_path / "claude"
    plain.write_text("not a program")
    with pytest.raises(ClaudeNotFound, match="not an executable file"):
        find_claude_binary(str(plain), {}, project_root=tmp_path)


def test_a_bare_flag_name_is_looked_up_on_the_daemons_path(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(places["path"].parent))
    found = find_claude_binary("claude", {}, project_root=places["root"])
    assert (found.path, found.source) == (places["path"], BinarySource.FLAG)


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [
        ("Darwin", "arm64", "claude-code-darwin-arm64"),
        ("Darwin", "x86_64", "claude-code-darwin-x64"),
        ("Windows", "AMD64", "claude-code-win32-x64"),
    ],
)
def test_platform_package_names(system: str, machine: str, expected: str) -> None:
    assert platform_package_name(system, machine) == expected
