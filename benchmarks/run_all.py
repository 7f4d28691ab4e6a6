"""Run every benchmark script, each in its own subprocess, and collect exit codes (``make bench``).

    python -m benchmarks.run_all [--quick] [--only router_r1,selector] [--skip ope] [--timeout 3600]

A benchmark is ``benchmarks/bench_*.py`` or ``benchmarks/*_bench.py``. A file whose name extends
another benchmark's name (``bench_router_r1_raw_vllm.py`` beside ``bench_router_r1.py``) is that
benchmark's helper and is not run by itself. Each script runs as ``python benchmarks/<name>.py`` from
the project root, in its own process, so that one script's Ray cluster or vLLM engine cannot leak into
the next; its stdout and stderr go to ``outputs/bench_logs/<name>.log``.

``--quick`` is passed through to scripts that accept it (their source mentions ``--quick``); a script
without a quick mode is skipped in a quick run rather than run at full size, and the summary says so.
Exit codes, durations and those decisions go to ``benchmarks/results/summary.json``, or
``summary_quick.json`` for ``--quick``: a quick run, which skips every script without a quick mode, never
replaces a full run's summary. The runner exits non-zero when any script failed.

A study's script (one that sets ``STUDY = "<study>"`` at its top level, the name of a dated study under
``docs/experiments/``) writes its results beside that study, not in ``benchmarks/results/``, and is not part
of ``make bench``: the runner lists it as skipped unless ``--studies`` is given.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "benchmarks"
RESULTS = BENCH_DIR / "results"
LOGS = ROOT / "outputs" / "bench_logs"


@dataclass
class ScriptResult:
    """One benchmark script's run (or why it was not run)."""

    name: str
    path: str
    guarded: bool
    """Has a top-level ``if __name__ == "__main__":``: importing it (vLLM's spawned workers do) runs nothing."""
    quick_supported: bool
    cmd: list[str] | None = None
    rc: int | None = None
    seconds: float | None = None
    skipped: str | None = None
    log: str | None = None
    tail: str | None = None


def has_main_guard(source: str) -> bool:
    """True if the module has a top-level ``if __name__ == "__main__":`` block."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            t = node.test
            names = [t.left, *t.comparators]
            if any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and \
                    any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names):
                return True
    return False


def study_of(source: str) -> str | None:
    """The dated study a script belongs to: its top-level ``STUDY = "<study>"``, or None for a benchmark."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "STUDY" for t in node.targets) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def discover(bench_dir: Path = BENCH_DIR) -> list[Path]:
    """Benchmark scripts in ``bench_dir``, helpers (``<benchmark>_*.py``) left out, sorted by name."""
    found = sorted({*bench_dir.glob("bench_*.py"), *bench_dir.glob("*_bench.py")})
    stems = {p.stem for p in found}
    return [p for p in found if not any(p.stem != s and p.stem.startswith(s + "_") for s in stems)]


def short_name(path: Path) -> str:
    s = path.stem
    return s[len("bench_"):] if s.startswith("bench_") else s


def run_script(path: Path, quick: bool, timeout: float, python: str = sys.executable,
               studies: bool = False) -> ScriptResult:
    source = path.read_text()
    res = ScriptResult(name=short_name(path), path=str(path.relative_to(ROOT)), guarded=has_main_guard(source),
                       quick_supported="--quick" in source)
    study = study_of(source)
    if study and not studies:
        res.skipped = f"a study's script (docs/experiments/{study}.md); --studies runs it"
        return res
    if not res.guarded:
        # without the guard, a spawned worker that imports the module would run the benchmark again
        res.skipped = "no `if __name__ == \"__main__\":` guard"
        return res
    if quick and not res.quick_supported:
        res.skipped = "no --quick mode; a quick run does not run it at full size"
        return res
    cmd = [python, str(path.relative_to(ROOT))] + (["--quick"] if quick else [])
    res.cmd = cmd
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{path.stem}{'_quick' if quick else ''}.log"
    res.log = str(log.relative_to(ROOT))
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    with log.open("w") as f:
        try:
            res.rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            res.rc = 124
            f.write(f"\n[run_all] killed after {timeout:.0f}s\n")
    res.seconds = round(time.perf_counter() - t0, 2)
    if res.rc != 0:
        lines = log.read_text(errors="replace").splitlines()
        res.tail = "\n".join(lines[-15:])
    return res


def summary_path(quick: bool) -> Path:
    """Where the summary goes by default: a quick run has its own file."""
    return RESULTS / ("summary_quick.json" if quick else "summary.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: passed to every script that has it")
    ap.add_argument("--only", default="", help="comma-separated names (router_r1, selector, pool_bench, ...)")
    ap.add_argument("--skip", default="", help="comma-separated names to leave out")
    ap.add_argument("--studies", action="store_true",
                    help="run the dated studies' scripts too (they write beside their study, docs/experiments/)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per script before it is killed")
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/results/summary.json (--quick: summary_quick.json)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = summary_path(args.quick)
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    scripts = [p for p in discover() if (not only or short_name(p) in only) and short_name(p) not in skip]
    results: list[ScriptResult] = []
    t0 = time.perf_counter()
    for p in scripts:
        print(f"[run_all] {short_name(p)} ...", flush=True)
        r = run_script(p, args.quick, args.timeout, studies=args.studies)
        results.append(r)
        state = f"skipped ({r.skipped})" if r.skipped else f"rc={r.rc} in {r.seconds:.0f}s (log: {r.log})"
        print(f"[run_all] {r.name}: {state}", flush=True)
    failed = [r.name for r in results if r.rc not in (None, 0)]
    summary = {"quick": args.quick, "python": sys.executable, "host": platform.node(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - (time.perf_counter() - t0))),
               "seconds": round(time.perf_counter() - t0, 2), "failed": failed,
               "ran": [r.name for r in results if r.rc is not None],
               "skipped": {r.name: r.skipped for r in results if r.skipped},
               "scripts": [asdict(r) for r in results]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"[run_all] {len(summary['ran'])} ran, {len(failed)} failed, {len(summary['skipped'])} skipped: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
