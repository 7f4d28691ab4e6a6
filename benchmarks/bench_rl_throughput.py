"""RL episodes per hour of the Router-R1 job on these cores: today's settings and the router's, side by side.

    .venv/bin/python benchmarks/bench_rl_throughput.py [--steps 6] [--warmup 20] [--arms router_same_batch,router,today]

Every arm is the main job itself (``rlrouter.trainer.job.run``: vLLM rollout worker, Ray Train LoRA learner,
weight sync, reward) on RouterBench's 11 replayed LLMs and the same training questions (data seed, curriculum
and draw are the job's), one arm after another in one invocation. Each runs the job's cold start (``--warmup``
supervised steps, 20 as the job's default: after 4, today's policy still wrote no valid trajectory, every turn ran
to its token budget, and its steps took twice as long) and ``--steps`` RL steps, with no held-out evaluation inside
the run. Episodes per hour is ``prompts_per_step x n_samples`` over the median RL step time
(``time/step_s``: rollout + reward + update + sync; the first RL step is left out of the median).

The arms (``ARMS``):

- ``today``: the job's defaults (``make run``'s settings) as they stood before the router's episode: Router-R1's
  sub-query action with its worked example, a ``<think>`` prefill, two calls and an answer turn the policy
  writes, KL to the start (a reference pass), 4 prompts x 4 samples, and the template run in every micro-batch
  (``learner.share_template=false``; the default since runs it once an update);
- ``router_same_batch``: a router's episode (``rollout.env.answer: reply``: the first reply is the answer),
  the compact action (``<search>MODEL</search>``, the short prompt, turn opened by ``<search>``), no KL term
  (no reference pass), on today's 4 x 4 batch: the episode alone;
- ``router``: the same with 16 prompts x 8 samples a step: the batch on top.

The router arms run the template once an update (``learner.share_template``, the default).

The ceiling: the learner's FLOPs an episode (``6 x N x tokens``, N the policy's non-embedding parameters, the tokens it runs
with the group's prompt counted once per group, from the step's token counts) at this CPU's measured fp32
matmul rate (``matmul_gflops``); ``of_ceiling`` is the measured rate over that. The learning curve of the
router's settings is the learning test's (benchmarks/bench_rl_bandit.py), not this run's.

Written: benchmarks/results/rl_throughput.json and rl_throughput.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_rl_throughput.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "rlrouter/engine.py", "conf")
for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
RESULTS = ROOT / "benchmarks" / "results"

ROUTER = ["rollout.env.action=compact", "rollout.env.answer=reply", "rollout.env.prefill='<search>'",
          "rollout.env.max_turns=1", "rollout.env.max_new_tokens=16", "learner.grpo.kl.coef=0.0"]
"""A router's episode: one compact route, answered by the reply; no KL term."""
ARMS: dict[str, list[str]] = {
    "today": ["learner.share_template=false"],
    "router_same_batch": ROUTER,
    "router": ROUTER + ["train.prompts_per_step=16", "train.n_samples=8", "train.warmup_batch=16"],
}
COMMON = ["pool=routerbench_replay", "data=routerbench", "train.eval_every=0", "eval.untrained=false",
          "eval.num_questions=8", "train.checkpoint_every=1000"]
"""Every arm: RouterBench's pool and questions, no held-out evaluation inside the run (8 questions after it)."""
POLICY_PARAMS = 134.5e6 - 49152 * 576
"""The learner's N in 6 x N x tokens: SmolLM2-135M's parameters less its embedding (49,152 x 576), which costs
no matmul; the tied LM head runs on the few policy positions only (``_PolicyWithValue``'s window)."""


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_router_r1", overrides=[f"++paths.root_dir={ROOT}", *overrides])


def matmul_gflops(n: int = 1024, reps: int = 20) -> float:
    """This process's fp32 matmul rate (GFLOP/s) on ``n x n`` matrices at torch's thread count, best of 3."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9)
    return best


def summarize(report: dict[str, Any], overrides: list[str], gflops: float) -> dict[str, Any]:
    """An arm's RL steps: per-step times and tokens, episodes per hour, and the learner's FLOP ceiling."""
    cfg = report["config"]["train"]
    per_step = int(cfg["prompts_per_step"]) * int(cfg["n_samples"])
    rows = [r for r in report["steps"] if "time/step_s" in r]
    if len(rows) < 2:
        raise SystemExit(f"an arm ran {len(rows)} RL steps; --steps must be at least 2")
    keep = ("time/step_s", "time/rollout_s", "time/generate_s", "time/route_s", "time/reward_s", "time/learn_s",
            "time/sync_s", "rollout/response_tokens", "learner/policy_tokens", "learner/tokens", "rollout/turns",
            "rollout/format_valid", "reward/total")
    steps = [{"step": r["step"], **{k: r[k] for k in keep if k in r}} for r in rows]
    timed = rows[1:]  # the first RL step pays one-off costs (the engine's first batch at a new shape)
    median = float(np.median([r["time/step_s"] for r in timed]))
    learn = float(np.median([r.get("time/learn_s", np.nan) for r in timed]))
    tokens = float(np.median([r.get("learner/tokens", np.nan) for r in timed]))
    out: dict[str, Any] = {
        "overrides": overrides, "prompts_per_step": int(cfg["prompts_per_step"]), "n_samples": int(cfg["n_samples"]),
        "episodes_per_step": per_step, "rl_steps": len(rows), "median_step_s": median,
        "episodes_per_hour": 3600.0 * per_step / median,
        "share": {k.removeprefix("time/").removesuffix("_s"): float(np.median([r.get(k, 0.0) for r in timed])) / median
                  for k in ("time/rollout_s", "time/learn_s", "time/sync_s", "time/reward_s")},
        "learner_tokens_per_episode": tokens / per_step,
        "response_tokens_per_episode": float(np.median([r["rollout/response_tokens"] for r in timed])),
        "steps": steps, "train_s": report.get("train_s"), "wall_s": report.get("wall_s"),
    }
    flops = 6 * POLICY_PARAMS * tokens / per_step  # per episode
    out["ceiling"] = {"flops_per_episode": flops, "episodes_per_hour": 3600.0 * gflops * 1e9 / flops,
                      "learner_seconds_at_ceiling": tokens * 6 * POLICY_PARAMS / (gflops * 1e9),
                      "learner_seconds": learn}
    out["of_ceiling"] = out["episodes_per_hour"] / out["ceiling"]["episodes_per_hour"]
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = res["arms"]
    names = list(arms)
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    rates = [arms[n]["episodes_per_hour"] for n in names]
    ceil = [arms[n]["ceiling"]["episodes_per_hour"] for n in names]
    x = np.arange(len(names))
    ax[0].bar(x - 0.2, rates, 0.4, label="measured")
    ax[0].bar(x + 0.2, ceil, 0.4, label="learner FLOP ceiling", alpha=0.5)
    ax[0].axhline(res["target_episodes_per_hour"], ls=":", color="grey", label=f"target {res['target_episodes_per_hour']:,}")
    ax[0].set_xticks(x, names)
    ax[0].set_yscale("log")
    ax[0].set_ylabel("episodes / hour")
    ax[0].set_title(f"RL episodes per hour (router / today: {res['ratio']:.1f}x)")
    ax[0].legend(fontsize=8)
    bottom = np.zeros(len(names))
    for part in ("rollout", "learn", "sync", "reward"):
        v = np.array([arms[n]["median_step_s"] * arms[n]["share"][part] for n in names])
        ax[1].bar(x, v, 0.5, bottom=bottom, label=part)
        bottom += v
    ax[1].set_xticks(x, names)
    ax[1].set_ylabel("seconds per RL step (median)")
    ax[1].set_title("where a step's time goes")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="RL steps per arm (the first is not timed)")
    ap.add_argument("--warmup", type=int, default=20, help="cold-start steps per arm (the job's default: a policy that writes whole trajectories)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--target", type=int, default=5000, help="episodes per hour the router arm must reach")
    args = ap.parse_args()
    from rlrouter.trainer.job import run

    names = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(names) - set(ARMS))
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; known: {sorted(ARMS)}")
    gflops = matmul_gflops()
    print(f"fp32 matmul: {gflops:.1f} GFLOP/s")
    res: dict[str, Any] = {"matmul_gflops": gflops, "policy_params": POLICY_PARAMS, "target_episodes_per_hour": args.target,
                           "common": COMMON, "arms": {}}
    stamp = time.strftime("%Y%m%d_%H%M%S")
    for name in names:
        overrides = [*COMMON, f"train.total_steps={args.steps}", f"train.warmup_steps={args.warmup}", *ARMS[name],
                     f"run_name=bench_rl_throughput_{stamp}_{name}"]
        print(f"== arm {name}: {' '.join(ARMS[name]) or '(the job defaults)'}", flush=True)
        report = run(compose(overrides))
        res["arms"][name] = summarize(report, ARMS[name], gflops)
        a = res["arms"][name]
        print(f"   {a['episodes_per_hour']:,.0f} episodes/hour (median step {a['median_step_s']:.1f} s, "
              f"{a['episodes_per_step']} episodes); ceiling {a['ceiling']['episodes_per_hour']:,.0f}", flush=True)
    if "today" in res["arms"] and "router" in res["arms"]:
        res["ratio"] = res["arms"]["router"]["episodes_per_hour"] / res["arms"]["today"]["episodes_per_hour"]
        if "router_same_batch" in res["arms"]:
            res["ratio_episode_alone"] = (res["arms"]["router_same_batch"]["episodes_per_hour"]
                                          / res["arms"]["today"]["episodes_per_hour"])
        res["target_met"] = res["arms"]["router"]["episodes_per_hour"] >= args.target
    out = RESULTS / "rl_throughput.json"
    write_result(out, res, MEASURES, indent=1,
                 command=" ".join(["benchmarks/bench_rl_throughput.py", *sys.argv[1:]]))
    if "ratio" in res:
        plot(res, RESULTS / "rl_throughput.png")
    print(json.dumps({k: v for k, v in res.items() if k != "arms"}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
