"""A trainer change that should not change learning, checked on learning: ``make run``'s curve after the change
next to the committed one before it (``benchmarks/results/make_run.json``, a copy of make run's ``report.json``),
point by point. ``--before`` also takes another run's ``report.json``, or a routing board of the two-model study
(its first run).

    make run ARGS="run_name=<run>"                                   # about 15 minutes on 2 cores
    .venv/bin/python benchmarks/bench_same_curve.py --run outputs/<run> --name <what changed>

Results: ``benchmarks/results/same_curve_<name>.json`` and ``.png`` (both curves on one plot).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rlrouter.data.io import read_jsonl  # noqa: E402 - needs ROOT on the path

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_same_curve.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "conf")

RESULTS = ROOT / "benchmarks" / "results"
KEYS = ("eval/mean_reward", "eval/accuracy", "eval/format_valid", "eval/cost_per_query")


def held_out(metrics: Path) -> list[dict[str, float]]:
    """The held-out rows of a run's metrics.jsonl (the steps with an evaluation)."""
    return [{"step": r["step"], **{k: r[k] for k in KEYS}} for _, r in read_jsonl(metrics) if KEYS[0] in r]


def curve_of(data: dict, where: str) -> dict:
    """``{"run", "held_out_curve"}`` of a run's report (or its copy, ``make_run.json``) or of a routing board's
    first run (``{"runs": [...]}``)."""
    if "runs" in data:
        return data["runs"][0]
    if "held_out_curve" not in data:
        raise SystemExit(f"{where}: neither a run's report (held_out_curve) nor a routing board (runs)")
    return {"run": (data.get("config") or {}).get("run_name", where), "held_out_curve": data["held_out_curve"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run after the change (its folder)")
    ap.add_argument("--name", required=True, help="what changed, for the file names")
    ap.add_argument("--before", default=str(RESULTS / "make_run.json"))
    args = ap.parse_args()
    before_file = curve_of(json.loads(Path(args.before).read_text()), args.before)
    before = [{"step": r["step"], **{k: r[k] for k in KEYS}} for r in before_file["held_out_curve"]]
    after = held_out(Path(args.run) / "metrics.jsonl")
    steps = [r["step"] for r in before]
    if [r["step"] for r in after] != steps:
        raise SystemExit(f"the runs evaluated different steps: {steps} vs {[r['step'] for r in after]}")
    diff = {k: max(abs(a[k] - b[k]) for a, b in zip(after, before)) for k in KEYS}
    res = {"before": {"run": before_file["run"], "curve": before}, "after": {"run": args.run, "curve": after},
           "max_abs_diff": diff, "gain_after": after[-1]["eval/mean_reward"] - after[0]["eval/mean_reward"],
           "command": " ".join(["benchmarks/bench_same_curve.py", *sys.argv[1:]])}
    out = RESULTS / f"same_curve_{args.name}.json"
    write_result(out, res, MEASURES, indent=2)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, curve, style in (("before", before, "o-"), ("after", after, "x--")):
        ax.plot([r["step"] for r in curve], [r["eval/mean_reward"] for r in curve], style, label=label)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out mean reward (32 questions)")
    ax.set_title(f"make run before / after: {args.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    print(json.dumps({"max_abs_diff": diff, "gain_after": res["gain_after"]}, indent=2))


if __name__ == "__main__":
    main()
