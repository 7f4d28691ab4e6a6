"""Does RL improve the Router-R1 policy? Held-out learning curves of the main job, arm by arm (issue 13).

    .venv/bin/python benchmarks/bench_learning.py [--arms grpo,ppo] [--steps 16] [--eval-every 2]
                                                  [--set train.prompts_per_step=8 ...] [--quick]

Every arm is the main job itself (``rlrouter.learner.job.run``, the config ``make run`` composes, plus the
arm's overrides): the untrained policy is evaluated, a supervised cold start teaches the format, the
held-out questions are evaluated greedily right after it (step 0: the cold-start level) and every
``--eval-every`` RL steps, then the final policy and the baselines. Arms run one after another in one
invocation, on the same data, seed, held-out questions and start.

Written: the ``learning`` section of benchmarks/results/router_r1.json (other sections are kept) and
benchmarks/results/router_r1_learning.png. Per arm: the held-out curve, the cold-start level, the best
and final held-out figures, the wall time of RL (evaluations excluded) until held-out format validity
first reaches ``--target`` (0.9), and the per-step training metrics (sampled reward and format validity,
``rollout/logprob_gap``, KL, entropy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
RESULTS = ROOT / "benchmarks" / "results"

ARMS: dict[str, list[str]] = {
    "grpo": [],
    "ppo": ["algo=ppo"],
}
"""Each arm's overrides on top of the main job's config and the shared ``--set`` ones."""


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_router_r1", overrides=[f"++paths.root_dir={ROOT}", *overrides])


def time_to(rows: list[dict[str, Any]], key: str, target: float) -> dict[str, Any]:
    """RL wall time (held-out evaluations excluded) from the cold-start evaluation until ``key`` first
    reaches ``target`` in a held-out evaluation; None when it never does."""
    evals = [r for r in rows if key in r]
    if not evals or evals[0]["step"] != 0:
        return {"reached": False, "seconds": None, "step": None}
    t0, spent_eval = evals[0]["time"], 0.0
    for r in evals[1:]:
        spent_eval += float(r.get("time/eval_s", 0.0))
        if r[key] >= target:
            return {"reached": True, "seconds": r["time"] - t0 - spent_eval, "step": r["step"]}
    return {"reached": False, "seconds": None, "step": None}


def summarize(report: dict[str, Any], target: float) -> dict[str, Any]:
    rows = report["steps"]
    evals = [r for r in rows if "eval/format_valid" in r]
    train = [r for r in rows if "reward/total" in r]
    keep = ("reward/total", "reward/format", "rollout/format_valid", "rollout/em", "rollout/logprob_gap",
            "rollout/is_ratio_mean", "rollout/is_ratio_max", "learner/kl", "learner/entropy", "learner/grad_norm",
            "time/step_s")
    cold = evals[0] if evals and evals[0]["step"] == 0 else None
    res = report["results"]
    ev_keys = ("eval/format_valid", "eval/mean_reward", "eval/accuracy", "eval/cost_per_query")
    out = {
        "untrained": {k: v for k, v in res.get("policy_untrained", {}).items() if k != "samples"},
        "cold_start": {k: cold[k] for k in ev_keys} if cold else None,
        "final": {k: evals[-1][k] for k in ev_keys} if evals else None,
        "best_format_valid": max((r["eval/format_valid"] for r in evals), default=None),
        "held_out_curve": [{"step": r["step"], **{k: r[k] for k in ev_keys}} for r in evals],
        "train_curve": [{"step": r["step"], **{k: r[k] for k in keep if k in r}} for r in train],
        "time_to_target": time_to(rows, "eval/format_valid", target),
        "train_s": report.get("train_s"), "wall_s": report.get("wall_s"),
        "baselines": {k: {m: v[m] for m in ("accuracy", "cost_per_query")} for k, v in res.items()
                      if not k.startswith("policy_")},
        "report": str(Path(report["checkpoint"]).parents[1] / "report.json") if report.get("checkpoint") else None,
    }
    if cold:
        curve = [r["eval/mean_reward"] for r in evals[1:]]
        out["reward_gain_over_cold_start"] = (evals[-1]["eval/mean_reward"] - cold["eval/mean_reward"])
        out["min_reward_after_cold_start"] = min(curve) if curve else None
        out["never_below_cold_start"] = bool(curve) and min(curve) >= cold["eval/mean_reward"]
    return out


def plot(arms: dict[str, dict[str, Any]], path: Path, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for i, (name, a) in enumerate(arms.items()):
        c = f"C{i}"
        hc = a["held_out_curve"]
        ax[0, 0].plot([r["step"] for r in hc], [r["eval/format_valid"] for r in hc], marker="o", color=c, label=name)
        ax[0, 1].plot([r["step"] for r in hc], [r["eval/mean_reward"] for r in hc], marker="o", color=c, label=name)
        tc = a["train_curve"]
        ax[1, 0].plot([r["step"] for r in tc], [r.get("rollout/format_valid") for r in tc], marker=".", color=c,
                      label=f"{name} (sampled)")
        ax[1, 1].plot([r["step"] for r in tc], [r.get("rollout/logprob_gap") for r in tc], marker=".", color=c,
                      label=name)
        if a.get("untrained"):
            ax[0, 0].scatter([-0.4], [a["untrained"]["format_valid"]], marker="x", color=c)
    ax[0, 0].axhline(target, ls=":", color="grey", lw=1, label=f"target {target}")
    ax[0, 0].set_title("held-out format validity (greedy; step 0 = cold start, x = untrained)")
    ax[0, 1].set_title("held-out mean Router-R1 reward")
    ax[1, 0].set_title("sampled format validity per RL step (T=1)")
    ax[1, 1].set_title("rollout/logprob_gap: |learner - vLLM| per token")
    ax[1, 1].set_yscale("log")
    for a in ax.flat:
        a.set_xlabel("RL step")
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="grpo,ppo", help=f"comma-separated, from {sorted(ARMS)}")
    ap.add_argument("--steps", type=int, default=16, help="RL steps per arm")
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.9, help="held-out format validity to time")
    ap.add_argument("--set", nargs="*", default=[], help="Hydra overrides shared by every arm")
    ap.add_argument("--share-cold-start", action="store_true",
                    help="arms after the first start from the first arm's cold-start checkpoint (train.init_from)")
    ap.add_argument("--quick", action="store_true", help="toy sizes; results to router_r1_learning_quick.json")
    args = ap.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"--arms: unknown {sorted(unknown)}; known: {sorted(ARMS)}")
    shared = [f"train.total_steps={args.steps}", f"train.eval_every={args.eval_every}", *args.set]
    if args.quick:
        shared = ["debug=cpu", "eval.num_questions=2", *shared]
    from rlrouter.learner.job import run

    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    start: list[str] = []
    for arm in arms:
        run_name = f"bench_learning_{arm}{'_quick' if args.quick else ''}"
        overrides = [*shared, *ARMS[arm], *start, f"run_name={run_name}"]
        print(f"[learning] arm {arm}: {' '.join(overrides)}", flush=True)
        report = run(compose(overrides))
        results[arm] = {"overrides": overrides, **summarize(report, args.target)}
        if args.share_cold_start and not start:
            cold = ROOT / "outputs" / run_name / "checkpoints" / "step_000000"
            start = [f"train.init_from={cold}", "eval.untrained=false"]
            results[arm]["cold_start_checkpoint"] = str(cold)
        s = results[arm]
        print(f"[learning] {arm}: cold start {s['cold_start']}, final {s['final']}, "
              f"time to {args.target}: {s['time_to_target']}", flush=True)
    section = {"what": "held-out learning curves of the main job (cold start, then RL), arm by arm, one run",
               "command": "python benchmarks/bench_learning.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "target_format_valid": args.target, "arms": results, "wall_s": time.perf_counter() - t_all}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "router_r1_learning_quick" if args.quick else "router_r1"
    path = RESULTS / f"{name}.json"
    full = json.loads(path.read_text()) if path.exists() else {}
    full["learning"] = section
    path.write_text(json.dumps(full, indent=2))
    plot(results, RESULTS / f"{'router_r1_learning_quick' if args.quick else 'router_r1_learning'}.png", args.target)
    print(f"[learning] wrote {path}", flush=True)
    return section


if __name__ == "__main__":
    main()
