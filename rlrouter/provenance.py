"""When a result was true: the command, the date and the commit it measured, and whether it still holds.

Every benchmark declares the paths its figures depend on (``MEASURES``, a module constant of the script) and
writes its result through :func:`stamp`, which adds a ``provenance`` block::

    {"command": "python benchmarks/bench_rl_bandit.py --steps 16", "date": "2026-12-02",
     "commit": "85afe17", "dirty": [], "measures": ["rlrouter/algos", "rlrouter/learner", ...]}

``dirty`` lists the measured paths that had uncommitted changes when it ran (the figure then belongs to
no commit). :func:`freshness` reads a result back and says whether the measured code has changed since
(``git diff <commit> -- <measures>``): the staleness report of ``make test`` (``tests/conftest.py``) and of
``make docs ARGS=--check`` lists every result whose code moved on, so a stale figure is visible, not silent.

A result committed before provenance existed carries a block written afterwards from git
(``"commit_source": "git log"``: the commit that added that version of the file; it was measured on that
commit's parent or on uncommitted work beside it, so the staleness it gives is a lower bound).
"""

from __future__ import annotations

import datetime
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = "provenance"


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def head_commit(root: Path = ROOT) -> str | None:
    """The checked-out commit (short hash), or None outside a git checkout."""
    return _git(root, "rev-parse", "--short", "HEAD")


def dirty_paths(measures: Iterable[str], root: Path = ROOT) -> list[str]:
    """The files under ``measures`` with uncommitted changes (staged, unstaged or untracked)."""
    paths = list(measures)
    if not paths:
        return []
    changed = (_git(root, "diff", "--name-only", "HEAD", "--", *paths) or "").splitlines()
    untracked = (_git(root, "ls-files", "--others", "--exclude-standard", "--", *paths) or "").splitlines()
    return sorted({p for p in [*changed, *untracked] if p})


def stamp(result: dict[str, Any], measures: Sequence[str], command: str | None = None,
          root: Path = ROOT) -> dict[str, Any]:
    """Add (and return) ``result["provenance"]``: the command line, today's UTC date, the commit, the
    measured paths and those of them with uncommitted changes. ``measures`` are paths relative to the
    project root (files or folders)."""
    if isinstance(measures, str) or not measures:
        raise ValueError("provenance.measures: a non-empty list of paths (files or folders) the result depends on")
    commit = head_commit(root)
    missing = [m for m in measures if not (root / m).exists()]
    if missing and commit is not None:  # outside a checkout (an installed package) the paths are not there
        raise ValueError(f"provenance.measures: no such path in {root}: {', '.join(missing)}")
    block = {"command": command or " ".join(["python", *map(shlex.quote, sys.argv)]),
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
             "commit": commit, "dirty": dirty_paths(measures, root) if commit else [], "measures": sorted(measures)}
    result[PROVENANCE] = block
    return block


@dataclass
class Freshness:
    """Whether one result's figures still describe the code: ``state`` is ``fresh``, ``stale`` (its measured
    code changed since its commit, or it was measured on uncommitted changes), or ``unknown`` (no
    provenance, or a commit this checkout does not have)."""

    result: str
    state: str
    date: str | None = None
    commit: str | None = None
    changed: list[str] = field(default_factory=list)
    why: str = ""

    def line(self) -> str:
        when = f" ({self.date}, {self.commit})" if self.date or self.commit else ""
        return f"{self.state:7s} {self.result}{when}: {self.why}" if self.why else f"{self.state:7s} {self.result}{when}"


def read_provenance(path: Path) -> Mapping[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    block = data.get(PROVENANCE) if isinstance(data, dict) else None
    return block if isinstance(block, dict) else None


def freshness(path: str | Path, root: Path = ROOT) -> Freshness:
    """Is the result at ``path`` (a JSON with a provenance block) still true of this checkout's code?"""
    path = Path(path)
    name = str(path.relative_to(root)) if path.is_absolute() and path.is_relative_to(root) else str(path)
    block = read_provenance(path)
    if block is None:
        return Freshness(name, "unknown", why="no provenance block (command, date, commit, measures)")
    commit, measures = block.get("commit"), list(block.get("measures") or [])
    f = Freshness(name, "unknown", date=block.get("date"), commit=commit)
    if not commit or _git(root, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        f.why = f"commit {commit!r} is not in this checkout"
        return f
    if not measures:
        f.why = "the result names no measured paths"
        return f
    changed = (_git(root, "diff", "--name-only", commit, "--", *measures) or "").splitlines()
    f.changed = sorted(set(changed))
    if block.get("dirty"):
        f.state, f.why = "stale", f"measured on uncommitted changes to {', '.join(block['dirty'][:3])}"
        if f.changed:
            f.why += f"; {len(f.changed)} measured files changed since"
        return f
    if f.changed:
        shown = ", ".join(f.changed[:3]) + (f" and {len(f.changed) - 3} more" if len(f.changed) > 3 else "")
        f.state, f.why = "stale", f"{len(f.changed)} measured files changed since: {shown}"
        return f
    f.state = "fresh"
    return f


def staleness_report(paths: Iterable[str | Path], root: Path = ROOT) -> list[Freshness]:
    """:func:`freshness` of each result, stale ones first, then unknown, then fresh."""
    order = {"stale": 0, "unknown": 1, "fresh": 2}
    return sorted((freshness(p, root) for p in paths), key=lambda f: (order[f.state], f.result))


def write_result(path: str | Path, result: dict[str, Any], measures: Sequence[str], *, indent: int = 1,
                 default: Any = None, command: str | None = None, root: Path = ROOT) -> Path:
    """Stamp ``result`` (:func:`stamp`) and write it as JSON to ``path``; returns the path."""
    stamp(result, measures, command, root)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent, default=default) + "\n")
    return path
