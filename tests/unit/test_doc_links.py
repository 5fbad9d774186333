"""Every document the code and the docs cite is in the repository, down to the section.

A citation is a path such as `docs/PROTOCOL.md#permission-requests` in a comment or docstring,
or a relative Markdown link between the docs; its section must be a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCANNED = ("src", "tests", "benchmarks", "scripts", "proto", "docs", "README.md")
SUFFIXES = {".py", ".md", ".proto", ".sql", ".toml", ""}
CITATION = re.compile(r"(?<![\w/.])((?:docs/)?[A-Z][A-Z_]*\.md)(#[a-z0-9-]+)?")


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs make it: lower case, punctuation dropped."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return "#" + text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
    return {_anchor(heading) for heading in headings}


def _sources() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
            continue
        files += [
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix in SUFFIXES
            and "v1" not in p.parts
            and "__pycache__" not in p.parts
            and "static" not in p.parts
        ]
    return files


def _citations() -> list[tuple[str, str, str]]:
    found = []
    for source in _sources():
        text = source.read_text(errors="replace")
        for match in CITATION.finditer(text):
            name, anchor = match.group(1), match.group(2) or ""
            if not name.startswith("docs/") and source.parent.name == "docs":
                name = f"docs/{name}"  # a link from one doc to another
            elif not name.startswith("docs/") and name != "README.md":
                continue  # a bare name outside docs/ (CLAUDE.md of a project, ...)
            found.append((str(source.relative_to(ROOT)), name, anchor))
    return found


CITATIONS = _citations()


def test_the_docs_are_cited() -> None:
    assert any(name == "docs/PROTOCOL.md" for _, name, _ in CITATIONS)


@pytest.mark.parametrize(("source", "name", "anchor"), sorted(set(CITATIONS)))
def test_a_citation_leads_to_a_section(source: str, name: str, anchor: str) -> None:
    target = ROOT / name
    assert target.is_file(), f"{source} cites {name}, which is not in the repository"
    if anchor:
        assert anchor in _anchors(target), f"{source} cites {name}{anchor}: no such heading"


PROSE_WIDTH = 100
WRAPPED = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]


def _long_prose_lines(path: Path) -> list[int]:
    """Lines of prose over the width: tables, indented code and fenced code may be longer."""
    long_lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith(("    ", "|")) and len(line) > PROSE_WIDTH:
            long_lines.append(number)
    return long_lines


@pytest.mark.parametrize("path", WRAPPED, ids=lambda path: path.name)
def test_prose_is_wrapped_at_100_columns(path: Path) -> None:
    assert _long_prose_lines(path) == [], f"{path.name}: lines over {PROSE_WIDTH} columns"
