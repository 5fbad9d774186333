"""split_command: where simple commands begin and end, what makes one opaque; never raises."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from betcode.permissions.shell_split import (
    CommandPart,
    match_views,
    normalize_whitespace,
    split_command,
)


def texts(command: str) -> list[tuple[str, bool]]:
    return [(part.text, part.opaque) for part in split_command(command)]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("npm   test", [("npm test", False)]),
        ("a && b || c; d | e & f", [(x, False) for x in "abcdef"]),
        ("a |& b ;; c", [("a", False), ("b", False), ("c", False)]),
        ("a\nb\n\nc", [("a", False), ("b", False), ("c", False)]),
        ("(a; b) && { c; }", [("a", False), ("b", False), ("{ c", False), ("}", False)]),
        ("echo 'a; b' \"c && d\"", [("echo 'a; b' \"c && d\"", False)]),
        ("echo a\\;b", [("echo a\\;b", False)]),
        ("echo $'it\\'s; x'", [("echo $'it\\'s; x'", False)]),
        ("echo $(rm -rf /) x", [("rm -rf /", False), ("echo $(rm -rf /) x", True)]),
        ('echo "$(whoami)"', [("whoami", False), ('echo "$(whoami)"', True)]),
        ("echo `ls`", [("ls", False), ("echo `ls`", True)]),
        ("diff <(ls a) >(cat)", [("ls a", False), ("cat", False), ("diff <(ls a) >(cat)", True)]),
        ("ls > out", [("ls > out", True)]),
        ("ls>out", [("ls>out", True)]),
        ("ls >> out", [("ls >> out", True)]),
        ("ls &> out", [("ls &> out", True)]),
        ("ls >& out", [("ls >& out", True)]),
        ("ls <> f", [("ls <> f", True)]),
        ("ls >", [("ls >", True)]),
        ("ls 2>&1 >/dev/null", [("ls 2>&1 >/dev/null", False)]),
        ("ls >&2", [("ls >&2", False)]),
        ("ls < in", [("ls < in", False)]),
        ("cat <<< 'word'", [("cat <<< 'word'", False)]),
        ("cat <<EOF\na; b\nEOF\nls", [("cat <<EOF", True), ("ls", False)]),
        ("cat <<-END\n\tx\n\tEND\nls", [("cat <<-END", True), ("ls", False)]),
        ("echo hi # c; rm x", [("echo hi", False)]),
        ("echo a#b", [("echo a#b", False)]),
        ("npm \\\ntest", [("npm test", False)]),
        ("echo 'open; rm x", [("echo 'open; rm x", False)]),
        ("echo $(unclosed", [("unclosed", False), ("echo $(unclosed", True)]),
        ("", []),
        (" ; && ", []),
    ],
)
def test_split(command: str, expected: list[tuple[str, bool]]) -> None:
    assert texts(command) == expected


def test_deep_nesting_stops_splitting_but_stays_opaque() -> None:
    command = "echo " + "$(" * 30 + "rm x" + ")" * 30
    parts = split_command(command)
    assert parts[-1].opaque
    assert all(part.text != "rm x" for part in parts)


@pytest.mark.parametrize(
    ("words", "view"),
    [
        (("sudo", "-u", "root", "rm", "x"), "rm x"),
        (("A=1", "B=2", "rm", "x"), "rm x"),
        (("timeout", "-s", "KILL", "5", "rm", "x"), "rm x"),
        (("env", "-i", "X=1", "nohup", "nice", "-n", "3", "rm"), "rm"),
        (("time", "-p", "rm"), "rm"),
        (("'rm'", "x"), "rm x"),
        (("/usr/bin/rm", "x"), "rm x"),
        (("then", "rm"), "rm"),
    ],
)
def test_match_views(words: tuple[str, ...], view: str) -> None:
    views = match_views(CommandPart(words, False))
    assert views[0] == " ".join(words)
    assert view in views


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("  a   b  ", "a b"),
        ("a\t\tb", "a b"),
        ("a '  ' b", "a '  ' b"),
        ('a "x  y" b', 'a "x  y" b'),
        ("a\\  b", "a\\  b"),
        ("a\nb", "a\nb"),
    ],
)
def test_normalize_whitespace(text: str, normal: str) -> None:
    assert normalize_whitespace(text) == normal


SHELLISH = st.text(alphabet=st.sampled_from(list("ab $()`'\"\\;&|<>#\n\t{}*-=/")))


@given(st.text() | SHELLISH)
def test_no_command_crashes_the_splitter(command: str) -> None:
    for part in split_command(command):
        assert part.words
        assert all(word for word in part.words)
        assert match_views(part)


@given(st.text() | SHELLISH)
def test_normalize_is_idempotent(command: str) -> None:
    once = normalize_whitespace(command)
    assert normalize_whitespace(once) == once
