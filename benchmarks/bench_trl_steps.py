"""GRPO step time, ours against TRL's ``GRPOTrainer``, on steps that learn: both from one cold-started
checkpoint, on the same prompts in the same order, with no held-out evaluation in between. Writes the
``step_timing`` section of benchmarks/results/router_r1.json.

    .venv/bin/python benchmarks/bench_trl_steps.py [--init-from outputs/<run>/checkpoints/step_000000] [--steps 4]

Without ``--init-from`` our arm runs ``make run``'s cold start first and TRL starts from that checkpoint.

``bench_router_r1.py --parts step`` times single-turn steps of the untrained policy, whose rewards are all the
format penalty (no spread: GRPO has nothing to learn, and loss and gradient are 0). Here both arms run
``make run``'s multi-turn task from a cold start that writes the protocol, so a step holds groups whose samples
score differently, as the steps users run do:

- ours: the main job (``rlrouter.trainer.job.run``: vLLM rollout worker, Ray Train learner), ``make run``'s config,
  ``train.init_from`` the cold start, ``train.eval_every=0``, each step's prompts dumped (``train.rollout_dump``);
- TRL: ``benchmarks/bench_learning_trl.py`` (TRL 1.16 ``GRPOTrainer`` through our ``RouterEnv`` in its
  ``rollout_func``, HF ``generate``, ``use_vllm=False``), the cold start's adapter, the same batch and reward, its
  dataset laid out in our data cursor's order with ``shuffle_dataset=False``, so step k trains on our step k's
  prompts (checked against our dump).

The first step of each arm is a warm-up and is not timed. Each step's record says what it held: mean reward,
the share of groups with reward spread (ours: ``rollout/informative_groups``; TRL: ``1 - frac_reward_zero_std``)
and the mean completion length. ``make bench`` installs TRL.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_learning import compose  # noqa: E402 - needs ROOT on the path

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_trl_steps.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "conf",
            "benchmarks/bench_learning.py")

RESULTS = ROOT / "benchmarks" / "results"
RUN_NAME = "bench_trl_steps_grpo"


def prompt_order(overrides: list[str], steps: int) -> list[int]:
    """The training questions our trainer draws at steps 0 .. steps-1 (its data cursor), in order."""
    from rlrouter.data.job import ensure_data
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.trainer.curriculum import batch_indices
    from rlrouter.trainer.job import RouterR1JobConfig

    job = RouterR1JobConfig.from_cfg(compose(overrides))
    n = len(load_router_r1_split(ensure_data(job.plain)[0]))
    return [i for s in range(steps) for i in batch_indices(n, job.train.prompts_per_step, s, job.train.seed)]


def run_ours(overrides: list[str]) -> dict[str, Any]:
    from rlrouter.data.io import read_jsonl
    from rlrouter.trainer.job import run

    shutil.rmtree(ROOT / "outputs" / RUN_NAME, ignore_errors=True)
    report = run(compose([*overrides, "train.rollout_dump=true", f"run_name={RUN_NAME}"]))
    rows = [m for m in report["steps"] if "reward/total" in m]
    dumps = sorted((ROOT / "outputs" / RUN_NAME / "rollouts").glob("step_*.jsonl"))
    drawn = [sorted({r["question"] for _, r in read_jsonl(d)}) for d in dumps]
    steps = [{"step": m["step"], "seconds": m["time/step_s"], "rollout_s": m["time/rollout_s"],
              "learn_s": m.get("time/learn_s"), "sync_s": m["time/sync_s"], "reward_mean": m["reward/total"],
              "groups_with_spread": m.get("rollout/informative_groups"),
              "completion_tokens_mean": m["rollout/response_tokens"], "loss": m.get("learner/loss"),
              "grad_norm": m.get("learner/grad_norm")} for m in rows]
    return {"steps": steps, "prompts": drawn}


def run_trl(overrides: list[str], steps: int, init_from: str, order: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", ROOT / "outputs" / "bench_trl_steps" / "trl.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps({"overrides": overrides, "init_from": init_from, "steps": steps, "eval_every": 0,
                                    "prompt_order": order}))
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_learning_trl.py"), str(spec), str(out)],
                       check=True, cwd=ROOT)
        res = json.loads(out.read_text())
    steps_out = [{"step": k + 1, "seconds": s, "reward_mean": h.get("reward"),
                  "groups_with_spread": None if h.get("frac_reward_zero_std") is None else 1 - h["frac_reward_zero_std"],
                  "completion_tokens_mean": h.get("completions/mean_length"), "loss": h.get("loss"),
                  "grad_norm": h.get("grad_norm")}
                 for k, (s, h) in enumerate(zip(res["step_s"], res["log_history"]))]
    return {"steps": steps_out, "trl_version": res["trl_version"], "config": res["config"],
            "prompts": res.get("prompt_order")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--init-from", default=None,
                    help="a cold-start checkpoint (a run's checkpoints/step_000000); default: our arm's own cold start")
    ap.add_argument("--steps", type=int, default=4, help="RL steps per arm; the first is a warm-up")
    ap.add_argument("--set", nargs="*", default=[], help="Hydra overrides shared by both arms")
    args = ap.parse_args(argv)
    overrides = [f"train.total_steps={args.steps}", "train.eval_every=0", "eval.untrained=false", *args.set]
    if args.init_from:
        overrides.append(f"train.init_from={Path(args.init_from).resolve()}")
    t0 = time.perf_counter()
    order = prompt_order(overrides, args.steps)
    ours = run_ours(overrides)
    init = str(Path(args.init_from).resolve()) if args.init_from else \
        str(ROOT / "outputs" / RUN_NAME / "checkpoints" / "step_000000")  # the cold start our arm just ran
    print(f"[trl-steps] ours: {[round(s['seconds'], 1) for s in ours['steps']]}", flush=True)
    trl = run_trl(overrides, args.steps, init, order)
    print(f"[trl-steps] TRL: {[round(s['seconds'], 1) for s in trl['steps']]}", flush=True)
    per = len(order) // args.steps
    same = ours["prompts"] == [sorted(order[k * per:(k + 1) * per]) for k in range(args.steps)]
    med = {name: statistics.median(s["seconds"] for s in arm["steps"][1:]) for name, arm in (("ours", ours), ("trl", trl))}
    section = {"what": "GRPO step time from one cold start on the same prompts, make run's multi-turn task, "
                       "no evaluations; the first step of each arm is a warm-up",
               "command": "python benchmarks/bench_trl_steps.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "init_from": args.init_from,
               "same_prompts": same, "ours": ours, "trl": trl, "step_s_median": med,
               "ours_over_trl": med["ours"] / med["trl"], "wall_s": time.perf_counter() - t0}
    path = RESULTS / "router_r1.json"
    full = json.loads(path.read_text()) if path.exists() else {}
    full["step_timing"] = section
    write_result(path, full, MEASURES, indent=2)
    print(f"[trl-steps] median step ours {med['ours']:.1f} s, TRL {med['trl']:.1f} s: "
          f"{section['ours_over_trl']:.2f}x; same prompts: {same}; wrote {path}", flush=True)
    return section


if __name__ == "__main__":
    main()
