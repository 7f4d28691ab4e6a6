"""What a newcomer meets first stays short and speaks to them: the README's length and paragraphs, and no
reference to the project's internal issue numbers in docs or code (a user cannot see them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

README_MAX_LINES = 150
PARAGRAPH_MAX_LINES = 8
ISSUE_NUMBER = re.compile(r"\bissues? \d+\b|\bissue-\d+\b", re.IGNORECASE)
SCANNED = ("README.md", "docs", "rlrouter", "jobs", "serve", "conf", "benchmarks", "tools", "tests", "Makefile")
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ""}


def paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each prose paragraph: blank-line separated, outside code fences,
    tables, headings and list items."""
    out, current, start, fenced = [], [], 0, False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        prose = line.strip() and not fenced and not line.lstrip().startswith(("|", "#", "- ", "* ", "!["))
        prose = prose and not re.match(r"\s*\d+\. ", line)
        if prose:
            if not current:
                start = n
            current.append(line)
        elif current:
            out.append((start, current))
            current = []
    if current:
        out.append((start, current))
    return out


def test_paragraphs_counts_prose_only() -> None:
    text = "a\nb\n\n```\nc\nd\n```\n| t |\n- item\ncontinued\n\ne\n"
    assert [(s, len(p)) for s, p in paragraphs(text)] == [(1, 2), (10, 1), (12, 1)]


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md: {len(lines)} lines, at most {README_MAX_LINES}"


HEADLINE_MAX_ROWS = 6
GUIDE_MAX_LINES = 400
"""A guide (docs/*.md) that grows past this splits by task; dated studies (docs/experiments/) keep their length."""


@pytest.mark.parametrize("guide", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_a_guide_is_short(guide: Path) -> None:
    n = len(guide.read_text().splitlines())
    assert n <= GUIDE_MAX_LINES, f"docs/{guide.name}: {n} lines, at most {GUIDE_MAX_LINES}: split it by task"


def test_readme_headline_is_a_few_claims() -> None:
    """The headline table: at most six rows, each with its doc linked."""
    text = (ROOT / "README.md").read_text()
    part = text[text.index("## Headline results"):]
    part = part[:part.index("\n## ", 3)]
    rows = [line for line in part.splitlines() if line.startswith("| ") and not line.startswith("| what |")]
    assert 0 < len(rows) <= HEADLINE_MAX_ROWS, f"README's headline table: {len(rows)} rows, at most {HEADLINE_MAX_ROWS}"
    unlinked = [r[:60] for r in rows if "](docs/" not in r.rsplit("|", 2)[-2]]
    assert not unlinked, f"headline rows without a doc link in their last cell: {unlinked}"


def test_readme_paragraphs_are_short() -> None:
    long = [f"line {s} ({len(p)} lines)" for s, p in paragraphs((ROOT / "README.md").read_text())
            if len(p) > PARAGRAPH_MAX_LINES]
    assert not long, f"README.md: paragraphs over {PARAGRAPH_MAX_LINES} lines at " + ", ".join(long)


def scanned_files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [f for f in files if f.suffix in SUFFIXES and "results" not in f.parts and "data" not in f.parts]
    return out


@pytest.mark.parametrize("path", scanned_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(path: Path) -> None:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return
    hits = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in ISSUE_NUMBER.finditer(text)]
    assert not hits, f"{path.relative_to(ROOT)} names internal issues: " + ", ".join(hits)
