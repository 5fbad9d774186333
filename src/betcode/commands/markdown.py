"""Custom command and agent files: markdown with an optional `---` frontmatter block.

Claude Code reads `.claude/commands/**/*.md` (a file per command; `sub/name.md` is `/sub:name`)
and `.claude/agents/*.md` (a file per agent, `name` and `description` in the frontmatter). Only
flat `key: value` pairs are needed here (description, argument-hint, name), so this reads them
without a YAML library: quoted values are unquoted, a `>` or `|` block joins its indented lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

MAX_DESCRIPTION_CHARS = 300
FENCE = "---"


@dataclass(frozen=True, slots=True)
class MarkdownFile:
    fields: dict[str, str]
    body: str

    def description(self) -> str:
        """The frontmatter's description, else the body's first non-empty line (without a
        leading `#`), cut to MAX_DESCRIPTION_CHARS."""
        text = self.fields.get("description", "")
        if not text:
            for line in self.body.splitlines():
                line = line.strip().lstrip("#").strip()
                if line:
                    text = line
                    break
        if len(text) > MAX_DESCRIPTION_CHARS:
            text = text[: MAX_DESCRIPTION_CHARS - 1] + "…"
        return text


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_frontmatter(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = ""
    block: list[str] | None = None
    for line in lines:
        if block is not None and (line.startswith((" ", "\t")) or not line.strip()):
            block.append(line.strip())
            continue
        if block is not None:
            fields[key] = " ".join(part for part in block if part)
            block = None
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or name.startswith((" ", "\t", "#")):
            continue
        key = name.strip().lower()
        value = value.strip()
        if value in (">", "|", ">-", "|-"):
            block = []
        else:
            fields[key] = _unquote(value)
    if block is not None:
        fields[key] = " ".join(part for part in block if part)
    return fields


def parse_markdown(text: str) -> MarkdownFile:
    lines = text.splitlines()
    if lines and lines[0].strip() == FENCE:
        for end in range(1, len(lines)):
            if lines[end].strip() == FENCE:
                return MarkdownFile(parse_frontmatter(lines[1:end]), "\n".join(lines[end + 1 :]))
    return MarkdownFile({}, text)


def command_name(relative: PurePosixPath) -> str:
    """`review.md` → `review`; `frontend/component.md` → `frontend:component`."""
    return ":".join((*relative.parent.parts, relative.stem))
