"""Split a Bash command line into the simple commands permission rules are matched against.

`split_command` never raises, whatever the input. It is not a shell: it knows just enough
syntax to find where one simple command ends and the next begins, and to notice constructs
whose effect a rule's words cannot describe.

* Separators: `&&`, `||`, `;`, `;;`, `|`, `|&`, `&` (background), newlines, and the
  parentheses of subshells. Inside single quotes, double quotes, `$'...'` and after a
  backslash they are plain characters. A backslash-newline joins lines.
* `# comment` (a `#` that starts a word) runs to the end of the line and is dropped.
* Command substitution `$(...)`, `` `...` ``, arithmetic `$((...))` and process
  substitution `<(...)`, `>(...)` (also inside double quotes): the inner command is split
  recursively and its parts are returned as parts of their own; the outer part is *opaque*.
* Output redirection to a file (`>`, `>>`, `>|`, `&>`, `&>>`, `<>`, `>&file`) makes a part
  opaque; `>/dev/null` and descriptor duplication such as `2>&1` do not.
* A here-document (`<<EOF` ... `EOF`, `<<-`) makes its part opaque; its body is data, skipped
  up to the delimiter line. An unterminated quote or substitution runs to the end of the text.

A part's text is its words joined by single spaces (quoted text kept verbatim), so
`npm   test` and `npm test` compare equal.

`match_views` gives the extra spellings deny and ask rules are tried against, so wrappers do
not hide a command from them: leading `VAR=value` assignments, shell keywords (`if`, `then`,
`do`, `!`, ...) and the wrappers `env`, `nohup`, `nice`, `timeout`, `time`, `command`,
`builtin`, `exec`, `sudo` stripped; quotes removed; a path-qualified program (`/bin/rm`)
reduced to its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Deeper substitutions are still opaque; their inner commands are just not split further.
MAX_NESTING = 8

# Blanks separate words; everything else not special to the scanner is an ordinary character.
_BLANK_RUN = re.compile(r"[ \t]+")
# Ordinary characters and blanks, taken a whole stretch at a time.
_PLAIN_CHUNK = re.compile(r"[^\n'\"\\`$<>;&|()#]+")
# What whitespace normalisation keeps verbatim: escapes and quoted strings (possibly unclosed).
_QUOTING = re.compile(r"['\"\\]")
_VERBATIM_OR_BLANKS = re.compile(r"""(\\.|'[^']*'?|"(?:\\.|[^"\\])*"?)|[ \t]+""", re.DOTALL)
_OUT_REDIRECT = re.compile(r">[>|]?(&?)")
_DUP_TARGET = re.compile(r"\d+-?|-")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"!", "{", "if", "then", "else", "elif", "do", "while", "until"})
# Wrapper program -> its options that consume the next word.
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nohup": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "sudo": frozenset({"-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-D", "-R", "-T"}),
}


@dataclass(frozen=True, slots=True)
class CommandPart:
    """One simple command. `opaque` parts do more than their words say (see module doc)."""

    words: tuple[str, ...]
    opaque: bool

    @property
    def text(self) -> str:
        return " ".join(self.words)


def split_command(command: str) -> tuple[CommandPart, ...]:
    """The simple commands of `command`, outer parts and substituted inner parts alike."""
    parts: list[CommandPart] = []
    _Scanner(command, 0, parts).run()
    return tuple(parts)


def normalize_whitespace(text: str) -> str:
    """`text` with runs of unquoted blanks collapsed to one space and the ends stripped."""
    if not _QUOTING.search(text):
        return _BLANK_RUN.sub(" ", text).strip(" ")
    return _VERBATIM_OR_BLANKS.sub(lambda m: m.group(1) or " ", text).strip(" ")


def match_views(part: CommandPart) -> tuple[str, ...]:
    """Spellings of `part` that deny and ask rules are matched against (module doc)."""
    stripped = " ".join(_strip_wrappers(part.words))
    unquoted = _unquote(stripped)
    program, _, arguments = unquoted.partition(" ")
    views = [part.text, stripped, unquoted]
    if "/" in program:
        views.append(f"{program.rsplit('/', 1)[1]} {arguments}".rstrip(" "))
    return tuple(dict.fromkeys(view for view in views if view))


def _strip_wrappers(words: tuple[str, ...]) -> tuple[str, ...]:
    i = 0
    while i < len(words):
        word = words[i]
        if word in _KEYWORDS or _ASSIGNMENT.match(word):
            i += 1
        elif word in _WRAPPERS:
            i = _skip_options(words, i + 1, _WRAPPERS[word])
            if word == "timeout" and i < len(words):
                i += 1  # the duration
        else:
            break
    return words[i:]


def _skip_options(words: tuple[str, ...], i: int, takes_argument: frozenset[str]) -> int:
    while i < len(words) and (words[i].startswith("-") or _ASSIGNMENT.match(words[i])):
        i += 2 if words[i] in takes_argument else 1
    return i


def _unquote(word: str) -> str:
    return word.replace("'", "").replace('"', "").replace("\\", "")


def _find_closing_paren(text: str, start: int) -> int:
    """Index of the `)` closing a `(` just before `start`, or len(text) if there is none."""
    depth = 1
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            end = text.find(c, i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


class _Scanner:
    """One pass over a command line; nested substitutions get scanners of their own."""

    def __init__(self, text: str, depth: int, out: list[CommandPart]) -> None:
        self.text = text
        self.depth = depth
        self.out = out
        self.i = 0
        self.words: list[str] = []
        self.word: list[str] = []
        self.opaque = False
        # A redirection waiting for its target word: (kind, offset into the current word).
        self.pending: tuple[str, int] | None = None
        self.heredocs: list[tuple[str, bool]] = []

    def run(self) -> None:
        text = self.text
        while self.i < len(text):
            plain = _PLAIN_CHUNK.match(text, self.i)
            if plain:
                self._plain(plain.group())
                self.i = plain.end()
                continue
            c = text[self.i]
            if c == "\n":
                self._end_part()
                self.i += 1
                self._skip_heredoc_bodies()
            elif c == "#":
                self._hash()
            elif c in "'\"\\`$":
                self._quoting(c)
            elif c in "<>":
                self._angle(c)
            else:
                self._operator(c)
        self._end_part()

    def _plain(self, chunk: str) -> None:
        first, *rest = _BLANK_RUN.split(chunk)
        if first:
            self.word.append(first)
        if not rest:
            return
        self._end_word()
        *middle, last = rest  # only the first and last pieces of a split can be empty
        for index, piece in enumerate(middle):
            if self.pending is None:
                self.words.extend(middle[index:])
                break
            self.word.append(piece)
            self._end_word()
        if last:
            self.word.append(last)

    def _hash(self) -> None:
        if self.word:
            self.word.append("#")
            self.i += 1
            return
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def _quoting(self, c: str) -> None:
        text, i = self.text, self.i
        nxt = text[i + 1 : i + 2]
        if c == "'":
            end = text.find("'", i + 1)
            self._take(len(text) if end < 0 else end + 1)
        elif c == '"':
            self._double_quoted()
        elif c == "\\":
            if nxt == "\n":
                self.i += 2  # line continuation
            else:
                self._take(i + 2)
        elif c == "`":
            self._backticks()
        elif nxt == "(":
            self._substitution(2)
        elif nxt == "'":
            self._ansi_c_quoted()
        else:
            self._take(i + 1)

    def _take(self, end: int) -> None:
        self.word.append(self.text[self.i : end])
        self.i = end

    def _double_quoted(self) -> None:
        text = self.text
        self._take(self.i + 1)
        while self.i < len(text):
            c = text[self.i]
            if c == "\\":
                self._take(self.i + 2)
            elif c == '"':
                self._take(self.i + 1)
                return
            elif c == "`":
                self._backticks()
            elif c == "$" and text[self.i + 1 : self.i + 2] == "(":
                self._substitution(2)
            else:
                self._take(self.i + 1)

    def _ansi_c_quoted(self) -> None:
        i = self.i + 2
        while i < len(self.text) and self.text[i] != "'":
            i += 2 if self.text[i] == "\\" else 1
        self._take(min(i + 1, len(self.text)))

    def _substitution(self, opener_length: int) -> None:
        start = self.i + opener_length
        end = _find_closing_paren(self.text, start)
        self._nested(self.text[start:end])
        self._take(min(end + 1, len(self.text)))

    def _backticks(self) -> None:
        i = self.i + 1
        while i < len(self.text) and self.text[i] != "`":
            i += 2 if self.text[i] == "\\" else 1
        end = min(i, len(self.text))
        self._nested(self.text[self.i + 1 : end].replace("\\`", "`"))
        self._take(min(end + 1, len(self.text)))

    def _nested(self, inner: str) -> None:
        self.opaque = True
        if self.depth < MAX_NESTING:
            _Scanner(inner, self.depth + 1, self.out).run()

    def _angle(self, c: str) -> None:
        text, i = self.text, self.i
        if text[i + 1 : i + 2] == "(":
            self._substitution(2)
            return
        if c == ">":
            op = _OUT_REDIRECT.match(text, i)
            assert op is not None  # text[i] is ">"
            self._take(op.end())
            self._expect_target("dup" if op.group(1) else "write")
        elif text.startswith("<<<", i):
            self._take(i + 3)
        elif text.startswith("<<", i):
            strip_tabs = text.startswith("<<-", i)
            self._take(i + (3 if strip_tabs else 2))
            self._expect_target("heredoc-tabs" if strip_tabs else "heredoc")
        elif text.startswith("<>", i):
            self._take(i + 2)
            self._expect_target("write")
        else:
            self._take(i + (2 if text.startswith("<&", i) else 1))

    def _expect_target(self, kind: str) -> None:
        self.pending = (kind, len("".join(self.word)))

    def _operator(self, c: str) -> None:
        text, i = self.text, self.i
        if c == "&" and text[i + 1 : i + 2] == ">":
            end = i + (3 if text.startswith("&>>", i) else 2)
            self._take(end)
            self._expect_target("write")
            return
        length = 1
        if c in "&|;" and text[i + 1 : i + 2] in ("&", "|", ";"):
            length = 3 if text.startswith(";;&", i) else 2
        self._end_part()
        self.i = i + length

    def _end_word(self) -> None:
        if not self.word:
            return
        word = "".join(self.word)
        self.word.clear()
        self.words.append(word)
        if self.pending is not None:
            kind, offset = self.pending
            target = word[offset:]
            if target:
                self.pending = None
                self._resolve_target(kind, target)
            else:
                self.pending = (kind, 0)

    def _resolve_target(self, kind: str, target: str) -> None:
        if kind.startswith("heredoc"):
            self.opaque = True
            self.heredocs.append((_unquote(target), kind == "heredoc-tabs"))
        elif not (target == "/dev/null" or (kind == "dup" and _DUP_TARGET.fullmatch(target))):
            self.opaque = True

    def _end_part(self) -> None:
        self._end_word()
        if self.pending is not None:
            self.opaque = True  # a redirection without a target: not a command we can vouch for
            self.pending = None
        if self.words:
            self.out.append(CommandPart(tuple(self.words), self.opaque))
        self.words = []
        self.opaque = False

    def _skip_heredoc_bodies(self) -> None:
        text = self.text
        for delimiter, strip_tabs in self.heredocs:
            while self.i < len(text):
                end = text.find("\n", self.i)
                end = len(text) if end < 0 else end
                line = text[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs.clear()
        self.i = min(self.i, len(self.text))
