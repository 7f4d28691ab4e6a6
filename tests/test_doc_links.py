"""Every relative link in the README and docs/ points at a file that exists, and at a heading that exists
when it names one (``file.md#heading``), so a reader who follows it lands where the text says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

STUDIES = ROOT / "docs" / "experiments"
STUDY_RESULTS = sorted(p for p in STUDIES.glob("*/results") if p.is_dir())
"""A dated study's own results (``docs/experiments/<study>/results/``): the files only that study cites."""
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.parent not in STUDY_RESULTS)]
"""The README and every doc under docs/ (a study's results folder holds results, not docs)."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", doc.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    return out


def links(doc: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8")))


def test_slug_matches_github() -> None:
    assert slug("Routing under Router-R1's reward (`bench_routing.py`)") == \
        "routing-under-router-r1s-reward-bench_routingpy"
    assert slug("The best router: form probe + option-match features") == \
        "the-best-router-form-probe--option-match-features"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


# -- benchmarks/results/ (and each study's results/) holds what a doc cites, and a doc cites only what it holds --

RESULTS = ROOT / "benchmarks" / "results"
RESULT_REF = re.compile(r"(?:benchmarks/results/)?([A-Za-z0-9_\-*.{},]+?\.(?:\*|json|jsonl|md|png|\{[a-z,]+\}))"
                        r"(?![A-Za-z0-9_])")
RUN_NAME = re.compile(r"--name\s+([A-Za-z0-9_\-]+)")
"""A benchmark's ``--name X`` writes ``benchmarks/results/X.*``: the command cites them."""


def expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",") for p in expand_braces(pattern[:m.start()] + alt + pattern[m.end():])]


def cited_results(text: str) -> set[str]:
    """File-name patterns (fnmatch) of the results a doc's text cites: ``name.json``, ``name.*``,
    ``name_*.{json,md}``, or a benchmark command's ``--name name``."""
    out = {p for m in RESULT_REF.finditer(text) for p in expand_braces(m.group(1))}
    return out | {f"{m.group(1)}.*" for m in RUN_NAME.finditer(text)}


def test_cited_results_reads_every_form() -> None:
    text = ("`benchmarks/results/a.json` and `b.*`, `groups_c22_*.{json,md}`, x --name run_1 --out y; "
            "report.json; nothing here")
    assert cited_results(text) == {"a.json", "b.*", "groups_c22_*.json", "groups_c22_*.md", "run_1.*", "report.json"}


def test_every_results_file_is_cited() -> None:
    import fnmatch

    patterns = set().union(*(cited_results(d.read_text(encoding="utf-8")) for d in DOCS))
    files = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    uncited = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert not uncited, ("benchmarks/results/ holds files no doc cites (cite them where their figures are "
                         "quoted, or remove them; git keeps history): " + ", ".join(uncited))


RESULTS_MAX_FILES = 40
"""benchmarks/results/ keeps the current result of each benchmark make bench runs; a study's live beside it."""


def test_results_hold_the_benchmarks_not_the_studies() -> None:
    files = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    assert len(files) <= RESULTS_MAX_FILES, (f"benchmarks/results/ holds {len(files)} files, at most {RESULTS_MAX_FILES}: "
                                             "move a study's results beside it (docs/experiments/<study>/results/)")


@pytest.mark.parametrize("results", STUDY_RESULTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_study_results_file_is_cited_by_its_study(results: Path) -> None:
    """A study's own results are cited the same way, by the study they sit beside (``<study>.md``), and none
    shares a name with a file in benchmarks/results/ (the docs cite results by name)."""
    import fnmatch

    study = results.parent.with_suffix(".md")
    assert study.is_file(), f"{results.relative_to(ROOT)} sits beside no study doc ({study.relative_to(ROOT)})"
    patterns = cited_results(study.read_text(encoding="utf-8"))
    files = sorted(p.name for p in results.iterdir() if p.is_file())
    assert files, f"{results.relative_to(ROOT)} is empty"
    uncited = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert not uncited, (f"{results.relative_to(ROOT)} holds files {study.relative_to(ROOT)} does not cite (cite "
                         "them where their figures are quoted, or remove them; git keeps history): " + ", ".join(uncited))
    both = sorted(set(files) & {p.name for p in RESULTS.iterdir()})
    assert not both, f"{results.relative_to(ROOT)} and benchmarks/results/ both hold " + ", ".join(both)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_results_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    named = {m.group(1).split("/")[-1] for m in re.finditer(r"benchmarks/results/([A-Za-z0-9_\-./]+\.(?:jsonl|json|md|png))",
                                                                text)}
    missing = sorted(n for n in named if not (RESULTS / n).exists())
    in_studies = re.finditer(r"docs/experiments/([A-Za-z0-9_\-]+)/results/([A-Za-z0-9_\-.]+\.(?:jsonl|json|md|png))"
                             r"(?![A-Za-z0-9_])", text)
    missing += sorted(f"docs/experiments/{m.group(1)}/results/{m.group(2)}" for m in in_studies
                      if not (STUDIES / m.group(1) / "results" / m.group(2)).exists())
    assert not missing, f"{doc.relative_to(ROOT)} cites results that are not committed: " + ", ".join(missing)
