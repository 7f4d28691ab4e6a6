"""Which committed results still describe today's code (``rlrouter.provenance``), the README's first.

Each result under ``benchmarks/results/`` (and under a dated study's own ``docs/experiments/<study>/results/``)
carries a provenance block (command, date, commit, the paths it measures). A result is *stale* when a
measured path changed since its commit (or it was measured on uncommitted changes), *unknown* without a
block or with a commit this checkout lacks. The README's results are those its pinned figures
(``tests/test_doc_figures.py``) and rendered tables (``tools/render_docs.py``) read.

    python tools/staleness.py           # the README's results, then a count of the others
    python tools/staleness.py --all     # every result, one line each
    python tools/staleness.py --strict  # exit 1 while a README result is stale or unknown

``make test`` prints the README part at the end of its run (``tests/conftest.py``), and
``make docs ARGS=--check`` prints it after its table check: a report that lists, not a failure.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STUDY_RESULTS = "docs/experiments/*/results/*.json"
"""A dated study's own results (the files only its doc cites), beside it rather than in benchmarks/results/."""
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlrouter.provenance import Freshness, staleness_report  # noqa: E402


def committed_results() -> list[Path]:
    """Every committed result JSON: benchmarks/results/, then each study's own results/."""
    return [*sorted(RESULTS.glob("*.json")), *sorted(ROOT.glob(STUDY_RESULTS))]


def readme_results() -> list[str]:
    """The result files (as the figures name them: names under benchmarks/results/) that the README's figures and
    tables read."""
    from tests.test_doc_figures import FIGURES, MANY_MODELS_FIGURES
    from tools.render_docs import TABLES

    names = {f.results for f in [*FIGURES, *MANY_MODELS_FIGURES] if f.doc == "README.md"}
    names |= {r for t in TABLES if t.doc == "README.md" for r in t.results}
    return sorted(n for n in names if n.endswith(".json"))


def report_lines(every: bool = False) -> tuple[list[str], list[Freshness]]:
    """(lines to print, the README results' freshness)."""
    from tests.test_doc_figures import result_path  # how a figure names its file: the one rule

    readme = [result_path(n) for n in readme_results()]
    mine = staleness_report(readme, ROOT)
    lines = [f"results the README quotes ({len(mine)}): "
             + ", ".join(f"{n} {s}" for s, n in sorted(Counter(f.state for f in mine).items()))]
    lines += ["  " + f.line() for f in mine]
    quoted = set(readme)
    others = staleness_report([p for p in committed_results() if p not in quoted], ROOT)
    counts = Counter(f.state for f in others)
    lines.append(f"other results ({len(others)}): " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + ("" if every else " (python tools/staleness.py --all lists them)"))
    if every:
        lines += ["  " + f.line() for f in others]
    return lines, mine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="list every result, not only the README's")
    ap.add_argument("--strict", action="store_true", help="exit 1 while a README result is stale or unknown")
    args = ap.parse_args(argv)
    lines, mine = report_lines(args.all)
    print("\n".join(lines))
    return 1 if args.strict and any(f.state != "fresh" for f in mine) else 0


if __name__ == "__main__":
    sys.exit(main())
