"""``make test`` from a fresh clone, timed, into ``benchmarks/results/fresh_clone.json``.

A green run in a working tree can hide a missing install step or an untracked file; this clones the
checked-out commit beside the project (``../fresh`` by default, so ``../shared/data`` is found as it is
in CI), runs ``make install`` (timed on its own: the install is not counted) and then ``make test`` with
``--durations``, and records the pytest summary, the wall times, the slowest tests and the commit.

    python tools/fresh_clone.py                 # ../fresh, removed first if it exists
    python tools/fresh_clone.py --dest ../ci    # elsewhere (a sibling of the project, for ../shared)

Uncommitted changes are not in the clone: the result names the commit it measured, and the tool refuses
to run on a dirty tree unless ``--allow-dirty`` (the figure then still belongs to HEAD, not to the tree).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rlrouter.provenance import dirty_paths, write_result  # noqa: E402

# everything a fresh clone's `make test` runs
MEASURES = ("Makefile", "pyproject.toml", ".ci", "rlrouter", "tests", "conf", "serve", "jobs", "tools")
# pytest's last line: "=== 3 passed, 1 skipped in 9.10s ===", or under -q without the rules
SUMMARY = re.compile(r"^(?:=+ )?(?P<text>\d+ (?:passed|failed|skipped|errors?)\b.* in (?P<s>[\d.]+)s(?: \([\d:]+\))?)"
                     r"(?: =+)?$", re.M)
DURATION = re.compile(r"^(?P<s>[\d.]+)s (?P<when>call|setup|teardown)\s+(?P<test>\S+)", re.M)


def pytest_summary(log: str) -> dict:
    """The last pytest summary line of ``log``: its text, seconds and counts (passed, failed, skipped...)."""
    found = list(SUMMARY.finditer(log))
    if not found:
        raise ValueError("no pytest summary line ('=== N passed ... in S s ===') in the log")
    m = found[-1]
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)",
                                               m.group("text"))}
    return {"pytest_summary": m.group("text"), "seconds": float(m.group("s")), **counts}


def slowest(log: str, n: int = 30) -> list[dict]:
    """The ``n`` longest test phases of pytest's ``--durations`` table."""
    rows = [{"seconds": float(m.group("s")), "phase": m.group("when"), "test": m.group("test")}
            for m in DURATION.finditer(log)]
    return sorted(rows, key=lambda r: -r["seconds"])[:n]


def run(cmd: list[str], cwd: Path, log: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    return rc, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=ROOT.parent / "fresh", help="where to clone (a sibling of the project)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fresh_clone.json")
    ap.add_argument("--allow-dirty", action="store_true", help="run although the tree has uncommitted changes")
    ap.add_argument("--from-log", action="store_true", help="do not run: write the result from the log a run left "
                                                            "in --dest (its install time is then unknown)")
    args = ap.parse_args(argv)
    if args.from_log:
        return write(args, (args.dest / "fresh_clone.log").read_text(errors="replace"), None, None, None)
    dirty = dirty_paths(MEASURES, ROOT)
    if dirty and not args.allow_dirty:
        print(f"fresh_clone: uncommitted changes ({', '.join(dirty[:5])}...) would not be in the clone; commit them "
              f"or pass --allow-dirty", file=sys.stderr)
        return 2
    if args.dest.exists():
        shutil.rmtree(args.dest)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(args.dest)], check=True)
    log = args.dest / "fresh_clone.log"
    print(f"fresh_clone: {args.dest} (log {log})", flush=True)
    rc_install, install_s = run(["make", "install"], args.dest, log)
    if rc_install:
        print(f"fresh_clone: make install failed (rc {rc_install}); see {log}", file=sys.stderr)
        return rc_install
    rc, test_s = run(["make", "test", "ARGS=--durations=40"], args.dest, log)
    return write(args, log.read_text(errors="replace"), rc, test_s, install_s)


def write(args: argparse.Namespace, text: str, rc: int | None, test_s: float | None, install_s: float | None) -> int:
    summary = pytest_summary(text)
    summary.setdefault("failed", 0)
    if rc is None:  # read from a log: the summary line says whether it passed
        rc = int(bool(summary["failed"] or summary.get("errors") or summary.get("error")))
    result = {"what": "make test on a fresh clone of the project, this machine, the venv install timed apart",
              "rc": rc, **summary, "make_test_wall_s": None if test_s is None else round(test_s, 1),
              "install_wall_s": None if install_s is None else round(install_s, 1), "slowest": slowest(text)}
    write_result(args.out, result, MEASURES, indent=1, root=args.dest)
    print(f"fresh_clone: rc {rc}, {result['pytest_summary']} -> {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
