"""truncate_json_line: any JSON prefix → valid JSON of at most the limit, with the marker."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from betcode.protocol.truncation import (
    MIN_TRUNCATION_LIMIT,
    truncate_json_line,
    truncation_marker,
)

MARKER = truncation_marker(999).decode()


def cut(text: str, limit: int = 300) -> object:
    result = truncate_json_line(text.encode(), 999, limit)
    assert len(result) <= limit
    return msgspec.json.decode(result)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        pytest.param(
            '{"a":"' + "x" * 400,
            {"a": "x" * (300 - 8 - len(MARKER)) + MARKER},
            id="inside a string value",
        ),
        pytest.param('{"a":[1,2,3,4', {"a": [1, 2, 3, MARKER]}, id="inside a number in an array"),
        pytest.param('{"a":"bb","c":12', {"a": "bb" + MARKER}, id="inside a number in an object"),
        pytest.param("[[[[", [[[[MARKER]]]], id="open arrays"),
        pytest.param('{"k', {"_truncated": MARKER}, id="inside a key"),
        pytest.param('{"key":"v\\u12', {"key": "v" + MARKER}, id="inside a unicode escape"),
        pytest.param('{"key":"v\\ud83d\\udc', {"key": "v" + MARKER}, id="inside a surrogate pair"),
        pytest.param('{"key":"v\\ud83d', {"key": "v" + MARKER}, id="after a lone high surrogate"),
        pytest.param('{"key":"v\\\\', {"key": "v\\" + MARKER}, id="after an escaped backslash"),
        pytest.param('{"key":"v\\', {"key": "v" + MARKER}, id="after a dangling backslash"),
        pytest.param('{"key":"vé', {"key": "vé" + MARKER}, id="after a complete UTF-8 character"),
        pytest.param(
            '{"a":{}}' + " " * 400, {"a": {}, "_truncated": MARKER}, id="padded complete object"
        ),
        pytest.param("[1,2]" + " " * 400, [1, 2, MARKER], id="padded complete array"),
        pytest.param(
            '{"x":"abc"}' + " " * 400, {"x": "abc" + MARKER}, id="padded object with a string"
        ),
        pytest.param(
            '"' + "s" * 400, "s" * (300 - 2 - len(MARKER)) + MARKER, id="top-level string"
        ),
        pytest.param('{"a":true,"b":fal', {"a": True, "_truncated": MARKER}, id="inside a literal"),
    ],
)
def test_cut_cases(head: str, expected: object) -> None:
    assert cut(head) == expected


def test_head_ending_inside_a_utf8_character_is_cut_before_it() -> None:
    head = b'{"a":"' + "é".encode() * 200
    result = truncate_json_line(head[:301], 999, 300)
    text = msgspec.json.decode(result)["a"]
    assert set(text.removesuffix(MARKER)) == {"é"}


def test_non_json_text_is_cut_as_text_with_the_marker() -> None:
    result = truncate_json_line(b"garbage " + "é".encode() * 300, 999, 300)
    assert len(result) <= 300
    assert result.endswith(MARKER.encode())
    result.decode("utf-8")


def test_whitespace_only_head_gives_a_json_string() -> None:
    assert cut(" " * 400) == MARKER


def test_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        truncate_json_line(b"{}", 5, MIN_TRUNCATION_LIMIT - 1)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=60),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=10), children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(
    value=_json,
    ascii_only=st.booleans(),
    limit=st.integers(min_value=MIN_TRUNCATION_LIMIT, max_value=900),
)
def test_any_cut_of_any_json_line_parses_and_carries_the_marker(
    value: object, ascii_only: bool, limit: int
) -> None:
    line = json.dumps(value, ensure_ascii=ascii_only).encode()
    repeat = 1
    while len(line) <= limit:  # the framer only cuts lines longer than the limit
        repeat += 1
        line = json.dumps([value] * repeat, ensure_ascii=ascii_only).encode()
    result = truncate_json_line(line[:limit], len(line), limit)
    assert len(result) <= limit
    msgspec.json.decode(result)
    assert truncation_marker(len(line)) in result
