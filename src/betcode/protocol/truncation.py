"""Cutting an oversized NDJSON line so that what is left is still valid JSON.

Only the head of an oversized line is ever kept in memory (see framing.py), so the cut works on a
prefix of the original JSON text. The usual reason a CLI line is huge is one huge string (a tool
result, a file's contents), and the head then ends inside it: that string is shortened, the marker
`[truncated: original_size=N bytes]` is appended inside it, and the open brackets are closed.
When the head ends anywhere else, the text is cut back to the last point where every value before
it is complete, the marker goes into the largest string kept (or into a new element when there is
none), and the brackets are closed. The result never exceeds the byte limit.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_QUOTE = 0x22
_BACKSLASH = 0x5C
_LBRACE = 0x7B
_LBRACKET = 0x5B
_CLOSER = {_LBRACE: b"}", _LBRACKET: b"]"}
_OPENER_OF = {0x7D: _LBRACE, 0x5D: _LBRACKET}
_WHITESPACE = b" \t\r\n"

# One structural token: a string (group 1 = its closing quote, absent when the text ends inside
# it; group 2 = a following colon, which makes it an object key) or a bracket or a comma.
# Numbers and literals need no token: a cut never ends inside one (it ends at a comma or bracket).
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.?)*+(")?(\s*+:)?|[{}\[\],]', re.DOTALL)
_HIGH_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\Z")

# Room a safe-point cut keeps free for the marker element: `,"_truncated":"` + marker + `"`.
_ELEMENT_OVERHEAD = len(b',"_truncated":""')
MIN_TRUNCATION_LIMIT = 256

# An open bracket chain, innermost first: (opener byte, enclosing chain) or None at top level.
# Sharing tails makes remembering the chain at every safe point free.
Brackets = tuple[int, "Brackets"] | None


class _SafePoint(NamedTuple):
    position: int  # keep head[:position]
    brackets: Brackets
    depth: int
    largest_string: tuple[int, int] | None  # (opening quote, one past closing quote)


class _Scan(NamedTuple):
    open_string: tuple[int, Brackets, int] | None  # (opening quote, brackets, depth)
    safe_point: _SafePoint | None


def truncation_marker(original_size: int) -> bytes:
    """The text appended to a cut value; `original_size` counts the line's bytes."""
    return b"[truncated: original_size=%d bytes]" % original_size


def truncate_json_line(head: bytes, original_size: int, limit: int) -> bytes:
    """Return at most `limit` bytes: `head` (a prefix of a JSON line) cut back to valid JSON.

    A head that does not start like a JSON object, array or string is cut as plain text with the
    marker appended; it was not JSON to begin with.
    """
    if limit < MIN_TRUNCATION_LIMIT:
        raise ValueError(f"truncation limit must be at least {MIN_TRUNCATION_LIMIT} bytes")
    marker = truncation_marker(original_size)
    start = len(head) - len(head.lstrip(_WHITESPACE))
    if start == len(head):
        return b'"' + marker + b'"'  # only leading whitespace survived the cut
    if head[start] not in b'{["':
        return _cut_plain_text(head, limit - len(marker)) + marker
    scan = _scan(head, start, limit - len(marker) - _ELEMENT_OVERHEAD)
    if scan is None:
        return _cut_plain_text(head, limit - len(marker)) + marker
    if scan.open_string is not None:
        closed = _close_open_string(head, scan.open_string, marker, limit)
        if closed is not None:
            return closed
    if scan.safe_point is None:
        return _cut_plain_text(head, limit - len(marker)) + marker
    return _close_at_safe_point(head, scan.safe_point, marker)


def _scan(head: bytes, start: int, budget: int) -> _Scan | None:
    """Walk the structure of `head`; None when it is not a JSON prefix after all.

    `budget` bounds the safe points worth remembering: position + closing brackets must fit.
    """
    brackets: Brackets = None
    depth = 0
    expect_key = False
    largest: tuple[int, int] | None = None
    safe: _SafePoint | None = None
    for match in _TOKEN.finditer(head, start):
        position = match.start()
        byte = head[position]
        safe_at = -1
        if byte == _QUOTE:
            in_object = brackets is not None and brackets[0] == _LBRACE
            is_key = match.group(2) is not None or (in_object and expect_key)
            if match.group(1) is None:
                # The head ends inside this string.
                open_string = None if is_key else (position, brackets, depth)
                return _Scan(open_string, safe)
            if is_key:
                expect_key = False
                continue
            end = match.end(1)
            if largest is None or end - position > largest[1] - largest[0]:
                largest = (position, end)
            safe_at = end
        elif byte in _CLOSER:
            brackets = (byte, brackets)
            depth += 1
            expect_key = byte == _LBRACE
            safe_at = match.end()
        elif byte in _OPENER_OF:
            if brackets is None or brackets[0] != _OPENER_OF[byte]:
                return None
            brackets = brackets[1]
            depth -= 1
            safe_at = match.end()
        else:  # a comma: every value before it is complete
            expect_key = brackets is not None and brackets[0] == _LBRACE
            safe_at = position
        if safe_at + depth <= budget:
            safe = _SafePoint(safe_at, brackets, depth, largest)
        if depth == 0:
            break  # the top-level value is complete; only whitespace can follow in valid JSON
    return _Scan(None, safe)


def _close_open_string(
    head: bytes, open_string: tuple[int, Brackets, int], marker: bytes, limit: int
) -> bytes | None:
    quote, brackets, depth = open_string
    keep = min(len(head), limit - len(marker) - 1 - depth)
    if keep <= quote:
        return None
    keep = _string_cut(head, quote + 1, keep)
    return head[:keep] + marker + b'"' + _closers(brackets)


def _close_at_safe_point(head: bytes, point: _SafePoint, marker: bytes) -> bytes:
    position, brackets, largest = point.position, point.brackets, point.largest_string
    if largest is not None:
        closing_quote = largest[1] - 1
        return head[:closing_quote] + marker + head[closing_quote:position] + _closers(brackets)
    if brackets is None:
        # A complete top-level container with no string in it: reopen it to add the element.
        position = len(head[:position].rstrip(_WHITESPACE)) - 1
        brackets = (_OPENER_OF[head[position]], None)
    container_is_empty = head[:position].rstrip(_WHITESPACE)[-1:] in (b"{", b"[")
    separator = b"" if container_is_empty else b","
    if brackets[0] == _LBRACKET:
        element = b'"' + marker + b'"'
    else:
        element = b'"_truncated":"' + marker + b'"'
    return head[:position] + separator + element + _closers(brackets)


def _closers(brackets: Brackets) -> bytes:
    parts = []
    while brackets is not None:
        parts.append(_CLOSER[brackets[0]])
        brackets = brackets[1]
    return b"".join(parts)


def _string_cut(data: bytes, low: int, keep: int) -> int:
    """Move `keep` back so data[low:keep] ends neither inside a UTF-8 character nor an escape."""
    keep = _utf8_boundary(data, low, keep)
    if not _is_escape_start(data, low, keep):
        keep -= 1  # a lone backslash would escape the closing quote
    unicode_escape = data.rfind(b"\\u", max(low, keep - 5), keep)
    if unicode_escape != -1 and _is_escape_start(data, low, unicode_escape):
        keep = unicode_escape  # \uXXXX with fewer than four hex digits kept
    if _HIGH_SURROGATE_ESCAPE.search(data, max(low, keep - 6), keep) and _is_escape_start(
        data, low, keep - 6
    ):
        keep -= 6  # its low surrogate was cut off, and a lone one is invalid JSON
    return keep


def _is_escape_start(data: bytes, low: int, backslash: int) -> bool:
    """True when the byte at `backslash` is not itself escaped: an even run of backslashes
    (from `low`) precedes it. With `backslash` one past the end, it says no escape is left open."""
    run_start = backslash
    while run_start > low and data[run_start - 1] == _BACKSLASH:
        run_start -= 1
    return (backslash - run_start) % 2 == 0


def _utf8_boundary(data: bytes, low: int, keep: int) -> int:
    lead = keep - 1
    while lead >= low and lead > keep - 4 and 0x80 <= data[lead] < 0xC0:
        lead -= 1
    if lead < low or data[lead] < 0x80:
        return keep
    first = data[lead]
    length = 2 if first < 0xE0 else 3 if first < 0xF0 else 4
    return keep if lead + length <= keep else lead


def _cut_plain_text(data: bytes, keep: int) -> bytes:
    return data[: _utf8_boundary(data, 0, min(keep, len(data)))]
