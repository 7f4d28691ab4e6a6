"""The RL learning test: a routing bandit whose optimum is known, learned through the real stack.

    .venv/bin/python benchmarks/bench_rl_bandit.py [--estimators grpo,grpo_std,rloo,batch_std,ppo]
                                                   [--starts uniform,wrong] [--steps 16] [--lr 1e-4] [--quick]

The task (``rlrouter.algos.bandit.routing_bandit``): three contexts (a geography, an arithmetic and a coding
question), five candidates, a fixed reward per (question, candidate). Each context has one best candidate,
0.3, 0.1 and 0.03 above its runner-up, and the runner-up is a trap built like RouterBench's ARC pair (it
wins most questions by a little and loses the rest by a lot). No fixed route is within 0.2 of the optimum.

Two kinds of curve, P(optimal candidate) per context and regret after each step:

- the real stack (``rlrouter.trainer.bandit_run``): SmolLM2-135M with LoRA, a vLLM rollout worker, one Ray
  Train learner rank, the weight sync and the ``route_table`` reward, driven by ``RouterR1Trainer``; a cold
  start on demonstrations sets the start (``uniform`` or ``wrong``: 60% on a poor candidate); per estimator
  and start, 6 prompts x 8 samples a step;
- references on the same table, at the same 48 episodes a step: exact gradient ascent on a per-context
  softmax, Thompson sampling, and each estimator on a tabular per-context softmax (SGD, 5 seeds).

Writes benchmarks/results/rl_bandit.json (per estimator: ``p_optimal``, ``p_trap`` and ``regret`` curves,
``final_p_optimal`` per context, the wall time of each step) and benchmarks/results/rl_bandit.png.
``--quick``: the shipped estimator and ``grpo_std`` from the uniform start, 8 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_rl_bandit.py", "rlrouter/algos", "rlrouter/trainer/bandit_run.py",
            "rlrouter/trainer/router_r1.py", "rlrouter/learner", "rlrouter/rollout", "rlrouter/sync",
            "rlrouter/rewards")
for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)
RESULTS = ROOT / "benchmarks" / "results"
TABULAR_STEPS = 300
TABULAR_LR = {"grpo_std": 1.0, "grpo": 4.0, "rloo": 4.0, "batch_std": 1.0, "ppo": 1.0}
"""SGD step of the tabular references per estimator: the ones that divide by a std see advantages of about
unit scale, the others of the reward's (about 0.25)."""


def references(task, starts: list[str], seeds: int = 5) -> dict:
    """Exact ascent, Thompson sampling and every estimator tabular, per start (the mean over ``seeds``)."""
    import numpy as np

    from rlrouter.algos.bandit import ESTIMATORS, exact_ascent, start_logits, tabular_run, thompson_run

    out: dict = {}
    for start in starts:
        logits = start_logits(task, start)
        ref = {"exact_ascent": exact_ascent(task, logits, TABULAR_STEPS, lr=5.0).to_dict(),
               "thompson": thompson_run(task, TABULAR_STEPS).to_dict()}
        for est in ESTIMATORS:
            runs = [tabular_run(task, est, logits, TABULAR_STEPS, lr=TABULAR_LR[est], seed=s) for s in range(seeds)]
            ref[f"tabular_{est}"] = {
                "episodes_per_step": runs[0].episodes_per_step, "seeds": seeds, "lr": TABULAR_LR[est],
                "p_optimal": np.mean([r.p_optimal for r in runs], axis=0).round(4).tolist(),
                "p_trap": np.mean([r.p_trap for r in runs], axis=0).round(4).tolist(),
                "regret": np.mean([r.regret for r in runs], axis=0).round(5).tolist(),
                "final_p_optimal": np.mean([r.p_optimal[-1] for r in runs], axis=0).round(4).tolist(),
                "final_p_optimal_min": np.min([r.p_optimal[-1] for r in runs], axis=0).round(4).tolist()}
        out[start] = ref
    return out


def real_stack(task, estimators: list[str], starts: list[str], steps: int, lr: float, work: Path,
               entropy_coef: float = 0.0, kl_coef: float = 0.0) -> dict:
    import ray

    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.trainer.bandit_run import ENV, ESTIMATOR_LEARNER, pool_config, run_bandit

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}})
    res = ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}, learner={"num_workers": 1, "num_cpus": 1})
    group = RolloutGroup("smollm2-135m-instruct", {"enable_lora": False}, ENV, pool_config(task, work / "pool"), res)
    out: dict = {}
    try:
        for start in starts:
            for est in estimators:
                t0 = time.perf_counter()
                # an entropy bonus and a KL term to the cold start (k3, in the loss) are the algorithm's own knobs:
                # GRPO's and PPO's configs both carry them
                algo = ESTIMATOR_LEARNER[est]["algo"]
                knobs = {**({"entropy_coef": entropy_coef} if entropy_coef else {}),
                         **({"kl": {"coef": kl_coef, "estimator": "k3", "in_reward": False}} if kl_coef else {})}
                extra = {algo: {**ESTIMATOR_LEARNER[est].get(algo, {}), **knobs}} if knobs else {}
                r = run_bandit(task, est, start, group, res, work / f"{est}_{start}", steps=steps, lr=lr, learner=extra)
                out.setdefault(start, {})[est] = r
                print(f"{start:8s} {est:10s} final p_optimal {[round(x, 3) for x in r['final_p_optimal']]} "
                      f"p_trap {[round(x, 3) for x in r['final_p_trap']]} regret {r['regret'][-1]:.3f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        group.shutdown()
        ray.shutdown()
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    starts = list(result["real_stack"]) or list(result["references"])
    n_ctx = len(result["task"]["contexts"])
    fig, axes = plt.subplots(len(starts), n_ctx + 1, figsize=(4 * (n_ctx + 1), 3.2 * len(starts)), squeeze=False)
    for row, start in enumerate(starts):
        real = result["real_stack"].get(start, {})
        refs = result["references"][start]
        for c in range(n_ctx):
            ax = axes[row][c]
            for est, r in real.items():
                ep = r["episodes_per_step"]
                ax.plot([i * ep for i in range(len(r["p_optimal"]))], [p[c] for p in r["p_optimal"]], marker="o",
                        ms=3, label=f"LLM {est}")
            for name in ("exact_ascent", "thompson", "tabular_grpo", "tabular_grpo_std"):
                r = refs[name]
                ep = r["episodes_per_step"] or 48  # exact ascent samples nothing: its step drawn as a learner's
                xs = [i * ep for i in range(len(r["p_optimal"]))]
                label = "exact ascent (x: steps x 48)" if name == "exact_ascent" else name
                ax.plot(xs, [p[c] for p in r["p_optimal"]], ls="--", lw=1, label=label)
            ax.set_xscale("symlog", linthresh=100)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{start}: context {c} (gap {result['task']['gaps'][c]:.2f})", fontsize=9)
            ax.set_xlabel("episodes")
            if c == 0:
                ax.set_ylabel("P(optimal candidate)")
                ax.legend(fontsize=6)
        ax = axes[row][n_ctx]
        for est, r in real.items():
            ep = r["episodes_per_step"]
            ax.plot([i * ep for i in range(len(r["regret"]))], r["regret"], marker="o", ms=3, label=f"LLM {est}")
        ax.set_title(f"{start}: regret", fontsize=9)
        ax.set_xlabel("episodes")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--estimators", default="grpo,grpo_std,rloo,batch_std,ppo")
    ap.add_argument("--starts", default="uniform,wrong")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--lr", type=float, default=None, help="the LoRA learning rate (default: the bandit run's)")
    ap.add_argument("--entropy", type=float, default=0.0, help="the real stack's algo entropy_coef (default 0: none)")
    ap.add_argument("--kl", type=float, default=0.0,
                    help="the real stack's KL coefficient to the cold-start policy (k3, in the loss; default 0: none)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--work", default=str(ROOT / "outputs" / "bench_rl_bandit"))
    ap.add_argument("--out", default=str(RESULTS / "rl_bandit.json"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON at --out")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return
    from rlrouter.algos.bandit import routing_bandit
    from rlrouter.trainer.bandit_run import LR

    estimators, starts, steps = args.estimators.split(","), args.starts.split(","), args.steps
    if args.quick:
        estimators, starts, steps = ["grpo", "grpo_std"], ["uniform"], 8
    lr = args.lr or LR
    task = routing_bandit()
    t0 = time.perf_counter()
    result = {
        "task": {"contexts": list(task.contexts), "candidates": list(task.candidates),
                 "means": task.means.round(4).tolist(), "gaps": task.gaps.round(4).tolist(),
                 "optimal": task.optimal.tolist(), "traps": list(task.traps),
                 "trap_wins": task.trap_wins().round(4).tolist(),
                 "best_fixed_route": float(task.means.mean(axis=0).max()), "optimum": float(task.means.max(axis=1).mean())},
        "settings": {"steps": steps, "lr": lr, "entropy_coef": args.entropy, "kl_coef": args.kl, "prompts_per_step": 6, "n_samples": 8,
                     "tabular_steps": TABULAR_STEPS},
        "references": references(task, starts),
    }
    result["real_stack"] = real_stack(task, estimators, starts, steps, lr, Path(args.work).resolve(), args.entropy,
                                      args.kl)
    result["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, result, MEASURES, indent=1)
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
