"""Path patterns of Read/Edit/Write rules, in the gitignore style Claude Code uses.

Where a pattern is anchored:

* `//abs/path` - the filesystem root (`//etc/**` is `/etc/**`);
* `~/path` - the home directory (`~` alone: everything under it);
* `/path` - the directory of the settings the rule came from (for a project's
  `.claude/settings*.json` that is the project root, for BetCode's own settings the config dir,
  for command-line and session rules the working directory);
* `./path`, `path` - the session's working directory.

A bare pattern with no `/` in it (`.env`, `*.pem`) matches that name at any depth below the
working directory, as in gitignore. Wildcards: `*` and `?` stay within one path segment,
`**` spans directories (`src/**/*.ts` matches `src/a/b/c.ts` and `src/c.ts`), `[abc]` /
`[!abc]` are character classes, a backslash quotes the next character. A pattern that names a
directory covers everything inside it, and `dir/**` covers `dir` itself too. `..` and `.`
segments are resolved in patterns and in the tool's path alike; a path outside the anchor
(`../x`) matches only a pattern that itself reaches up with `..`. Matching is case-sensitive
and purely textual: symlinks are not followed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import Enum


class Anchor(Enum):
    ROOT = "root"
    HOME = "home"
    SETTINGS = "settings"
    CWD = "cwd"


@dataclass(frozen=True, slots=True)
class PathPattern:
    anchor: Anchor
    base_dir: str | None  # for Anchor.SETTINGS; None means the working directory
    regex: re.Pattern[str]
    reaches_up: bool

    def anchor_dir(self, *, cwd: str, home: str) -> str:
        if self.anchor is Anchor.ROOT:
            return "/"
        if self.anchor is Anchor.HOME:
            return home
        if self.anchor is Anchor.SETTINGS and self.base_dir is not None:
            return self.base_dir
        return cwd


def parse_path_pattern(spec: str, base_dir: str | None) -> PathPattern:
    """Compile a path rule specifier; raises ValueError with the reason when it is malformed."""
    if spec.startswith("//"):
        anchor, rest = Anchor.ROOT, spec[2:]
    elif spec == "~" or spec.startswith("~/"):
        anchor, rest = Anchor.HOME, spec[2:]
    elif spec.startswith("~"):
        raise ValueError("only `~/` (your own home) is supported, not `~user/`")
    elif spec.startswith("/"):
        anchor, rest = Anchor.SETTINGS, spec[1:]
    else:
        anchor, rest = Anchor.CWD, spec
    unanchored = anchor is Anchor.CWD and "/" not in spec.rstrip("/")
    rest = _normalize(rest, anchor)
    prefix = "(?:[^/]*/)*" if unanchored else ""
    # `dir/**` also matches `dir` itself (a Glob or Grep of the directory), and any pattern
    # that matches a directory matches everything inside it.
    body = glob_to_regex(rest[:-3]) if rest.endswith("/**") else glob_to_regex(rest)
    regex = re.compile(f"{prefix}{body}(?:/.*)?", re.DOTALL)
    reaches_up = rest == ".." or rest.startswith("../")
    return PathPattern(anchor, base_dir, regex, reaches_up)


def absolute_path(path: str, cwd: str) -> str:
    """`path` made absolute against `cwd`, with `.`/`..` resolved and slashes collapsed."""
    joined = posixpath.normpath(posixpath.join(cwd, path))
    return "/" + joined.lstrip("/") if joined.startswith("//") else joined


def _normalize(rest: str, anchor: Anchor) -> str:
    if rest.strip("/") in ("", "."):
        return "**"
    if anchor is Anchor.ROOT:
        return posixpath.normpath("/" + rest).lstrip("/") or "**"
    return posixpath.normpath(rest)


def glob_to_regex(glob: str) -> str:
    """Regex source for a gitignore-style glob over a relative path."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            i = _stars(glob, i, out)
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            i = _char_class(glob, i, out)
            continue
        elif c == "\\":
            if i + 1 == len(glob):
                raise ValueError("the pattern ends with a lone backslash")
            out.append(re.escape(glob[i + 1]))
            i += 1
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _stars(glob: str, i: int, out: list[str]) -> int:
    end = i
    while end < len(glob) and glob[end] == "*":
        end += 1
    whole_segment = (i == 0 or glob[i - 1] == "/") and end - i >= 2
    if whole_segment and end < len(glob) and glob[end] == "/":
        out.append("(?:[^/]*/)*")
        return end + 1
    out.append(".*" if whole_segment and end == len(glob) else "[^/]*")
    return end


def _char_class(glob: str, i: int, out: list[str]) -> int:
    j = i + 1
    if j < len(glob) and glob[j] in "!^":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    close = glob.find("]", j)
    if close < 0:
        raise ValueError("a `[` character class is not closed with `]`")
    body = glob[i + 1 : close]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    escaped = "".join("\\" + ch if ch in "\\[]&~|^" else ch for ch in body)
    # As in gitignore, a class never matches the separator.
    cls = f"[^{escaped}/]" if negate else f"(?!/)[{escaped}]"
    try:
        re.compile(cls)
    except re.error as error:
        raise ValueError(f"bad character class `{glob[i : close + 1]}`: {error.msg}") from None
    out.append(cls)
    return close + 1
