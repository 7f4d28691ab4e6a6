"""Does RL improve the Router-R1 policy? Held-out learning curves of the main job, arm by arm.

    .venv/bin/python benchmarks/bench_learning.py [--arms grpo,ppo] [--steps 16] [--eval-every 2]
                                                  [--set train.prompts_per_step=8 ...] [--quick]
    .venv/bin/python benchmarks/bench_learning.py --arms '' --from-report sanity=outputs/<run>/report.json --keep-arms

Every arm is the main job itself (``rlrouter.trainer.job.run``, the config ``make run`` composes, plus the
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
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_learning.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "conf")
for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
RESULTS = ROOT / "benchmarks" / "results"

ARMS: dict[str, list[str]] = {
    "grpo": [],
    "ppo": ["algo=ppo"],
    "trl": [],
    # the sanity run: RL with no cold start on the graded format reward alone: the untrained policy
    # writes no valid trajectory, so 8 samples a prompt at T 0.7 give GRPO's groups some spread, and the
    # turn opens with "<think>" as the prompt's example does (not "<think>\n"), which the policy then continues
    # by copying the example's closed thought (docs/benchmarks.md)
    "sanity": ["reward=format_only", "train.warmup_steps=0", "train.n_samples=8", "learner.temperature=0.7",
               "learner.lr=1e-3", "learner.lr_warmup_steps=0", "rollout.env.prefill='<think>'",
               "eval.untrained=false"],
}
"""Each arm's overrides on top of the main job's config and the shared ``--set`` ones. ``trl`` is TRL's
``GRPOTrainer`` on the same task, start, data, reward and batch (benchmarks/bench_learning_trl.py, its own
process); it starts from ``--set train.init_from=...`` or, with ``--share-cold-start``, from the cold start of
an arm of ours run before it."""


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_router_r1", overrides=[f"++paths.root_dir={ROOT}", *overrides])


EVAL_ROW_KEYS = ("step", "time", "time/eval_s", "eval/format_valid", "eval/mean_reward")
"""What each arm keeps of its held-out evaluations to time them (``time_to``, ``time_to_quality``)."""


def time_to(rows: list[dict[str, Any]], key: str, target: float) -> dict[str, Any]:
    """RL wall time (held-out evaluations excluded) from the cold-start evaluation until ``key`` first
    reaches ``target`` in a held-out evaluation; None when it never does, 0 s at step 0 when the cold
    start already reaches it (RL had nothing to do)."""
    evals = [r for r in rows if key in r]
    if not evals or evals[0]["step"] != 0:
        return {"reached": False, "seconds": None, "step": None}
    if evals[0][key] >= target:
        return {"reached": True, "seconds": 0.0, "step": 0}
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
    keep = ("reward/total", "reward/format", "rollout/format_valid", "rollout/answered", "rollout/em",
            "rollout/logprob_gap", "rollout/is_ratio_mean", "rollout/is_ratio_max", "learner/kl", "learner/entropy",
            "learner/grad_norm", "time/step_s")
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
        "eval_rows": [{k: r.get(k, 0.0) for k in EVAL_ROW_KEYS} for r in evals],
        "train_s": report.get("train_s"), "wall_s": report.get("wall_s"),
        "baselines": {k: {m: v[m] for m in ("accuracy", "cost_per_query")} for k, v in res.items()
                      if not k.startswith("policy_")},
        "report": str(Path(report["checkpoint"]).parents[1] / "report.json") if report.get("checkpoint") else None,
        "best_fixed_route": best_fixed_route(report),
    }
    if cold:
        curve = [r["eval/mean_reward"] for r in evals[1:]]
        out["reward_gain_over_cold_start"] = (evals[-1]["eval/mean_reward"] - cold["eval/mean_reward"])
        out["min_reward_after_cold_start"] = min(curve) if curve else None
        out["never_below_cold_start"] = bool(curve) and min(curve) >= cold["eval/mean_reward"]
    return out


def best_fixed_route(report: dict[str, Any]) -> dict[str, Any] | None:
    """The fixed route the job's report names best (chosen on the training questions' logs) and its mean
    reward on the held-out questions; None for a report without routing scores."""
    routing = report.get("routing") or {}
    name = routing.get("best_fixed")
    if not name or name not in (routing.get("routes") or {}):
        return None
    return {"route": name, "mean_reward": routing["routes"][name]["mean_reward"]}


def from_report(path: Path, target: float) -> dict[str, Any]:
    """An arm from a finished job's ``report.json``, summarised as a run of this benchmark is, with the job's
    command line (its overrides) and the time the report was written."""
    if not path.is_file():
        raise SystemExit(f"--from-report: {path} is not a file (a job's outputs/<run>/report.json)")
    report = json.loads(path.read_text())
    hydra = path.parent / "hydra" / ".hydra" / "overrides.yaml"
    overrides = None
    if hydra.is_file():
        import yaml

        overrides = yaml.safe_load(hydra.read_text())
    written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
    return {"overrides": overrides, **summarize(report, target), "measured_in": f"{path} ({written})",
            "learner": {k: report["config"]["learner"].get(k) for k in ("lr", "lr_warmup_steps", "algo")}}


def run_trl(overrides: list[str], steps: int, eval_every: int, target: float) -> dict[str, Any]:
    """The ``trl`` arm in its own process (TRL patches transformers/accelerate state); its held-out rows are
    summarised as our arms' are."""
    import subprocess
    import tempfile

    init_from = next(o.split("=", 1)[1] for o in overrides if o.startswith("train.init_from="))
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", ROOT / "outputs" / "bench_learning_trl" / "trl.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps({"overrides": [o for o in overrides if not o.startswith("run_name=")],
                                    "init_from": init_from, "steps": steps, "eval_every": eval_every}))
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_learning_trl.py"), str(spec), str(out)],
                       check=True, cwd=ROOT)
        res = json.loads(out.read_text())
    evals = res["held_out"]
    ev_keys = ("eval/format_valid", "eval/mean_reward", "eval/accuracy", "eval/cost_per_query")
    cold = evals[0] if evals and evals[0]["step"] == 0 else None
    out_d: dict[str, Any] = {
        "trl_version": res["trl_version"], "config": res["config"],
        "cold_start": {k: cold[k] for k in ev_keys} if cold else None,
        "final": {k: evals[-1][k] for k in ev_keys} if evals else None,
        "best_format_valid": max((r["eval/format_valid"] for r in evals), default=None),
        "held_out_curve": [{"step": r["step"], **{k: r[k] for k in ev_keys}} for r in evals],
        "format_failures": {r["step"]: r["format_failures"] for r in evals},
        "train_curve": [{"step": h.get("step"), "reward/total": h.get("reward"),
                         "time/step_s": s} for h, s in zip(res["log_history"], trl_step_s(res))],
        "time_to_target": time_to(evals, "eval/format_valid", target),
        "eval_rows": [{k: r[k] for k in EVAL_ROW_KEYS} for r in evals],
        "train_s": res["wall_s"] - sum(r["time/eval_s"] for r in evals), "wall_s": res["wall_s"],
        "evaluator": "greedy HF generate through RouterEnv (not vLLM)",
    }
    if cold:
        curve = [r["eval/mean_reward"] for r in evals[1:]]
        out_d["reward_gain_over_cold_start"] = evals[-1]["eval/mean_reward"] - cold["eval/mean_reward"]
        out_d["min_reward_after_cold_start"] = min(curve) if curve else None
        out_d["never_below_cold_start"] = bool(curve) and min(curve) >= cold["eval/mean_reward"]
    return out_d


def trl_step_s(res: dict[str, Any]) -> list[float]:
    """TRL's step times without held-out evaluations: bench_learning_trl.py marks the end of each step
    before evaluating, so the interval of step k + 1 holds the evaluation made after step k."""
    eval_s = {r["step"]: r["time/eval_s"] for r in res["held_out"] if r["step"] > 0}
    return [s - eval_s.get(k, 0.0) for k, s in enumerate(res["step_s"])]


def time_to_quality(ours: dict[str, Any], trl: dict[str, Any], target: float) -> dict[str, Any]:
    """RL wall time each arm needs to reach held-out format validity ``target`` (or, when either never
    does, to reach the best validity both reach), and TRL's over ours; then the time each needs to reach
    the held-out reward of the best fixed route (the one the job's report picked on the training logs), and
    whether either arm ever rose above it."""
    a, b = ours["time_to_target"], trl["time_to_target"]
    out: dict[str, Any] = {"target": target, "ours_s": a["seconds"], "trl_s": b["seconds"],
                           "ours_step": a["step"], "trl_step": b["step"]}
    if not (a["reached"] and b["reached"]):
        level = min(ours["best_format_valid"] or 0.0, trl["best_format_valid"] or 0.0)
        out["target"] = level
        out["note"] = f"{target} not reached by both; timed to {level}, the best level both reached"
        for name, arm in (("ours", ours), ("trl", trl)):
            t = time_to(arm["eval_rows"], "eval/format_valid", level)
            out[f"{name}_s"], out[f"{name}_step"] = t["seconds"], t["step"]
    if out["ours_s"] and out["trl_s"]:
        out["trl_over_ours"] = out["trl_s"] / out["ours_s"]
    elif out["ours_s"] == 0.0 and out["trl_s"] == 0.0:
        out["note"] = f"both cold starts already reach format validity {out['target']}: no RL time to compare"
    fixed = ours.get("best_fixed_route")
    if fixed:
        # the same held-out questions, so the same fixed-route reward for both arms
        out["best_fixed_route"] = dict(fixed)
        for name, arm in (("ours", ours), ("trl", trl)):
            t = time_to(arm["eval_rows"], "eval/mean_reward", fixed["mean_reward"] - 1e-9)
            out["best_fixed_route"][f"{name}_s"], out["best_fixed_route"][f"{name}_step"] = t["seconds"], t["step"]
            out["best_fixed_route"][f"{name}_above"] = any(
                r["eval/mean_reward"] > fixed["mean_reward"] + 1e-9 for r in arm["held_out_curve"])
        b = out["best_fixed_route"]
        if b["ours_s"] and b["trl_s"]:
            b["trl_over_ours"] = b["trl_s"] / b["ours_s"]
    return out


def plot(arms: dict[str, dict[str, Any]], path: Path, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    # the sanity arm's reward is the graded format reward alone: its own figure (plot_sanity)
    arms = {k: a for k, a in arms.items() if isinstance(a, dict) and "held_out_curve" in a and k != "sanity"}
    for i, (name, a) in enumerate(arms.items()):
        c = f"C{i}"
        # an arm kept from an earlier run (--keep-arms) ran older code and its own start: dashed, and said so
        ls, label = ("--", f"{name} (earlier run)") if a.get("measured_in") else ("-", name)
        hc = a["held_out_curve"]
        ax[0, 0].plot([r["step"] for r in hc], [r["eval/format_valid"] for r in hc], marker="o", color=c, ls=ls,
                      label=label)
        ax[0, 1].plot([r["step"] for r in hc], [r["eval/mean_reward"] for r in hc], marker="o", color=c, ls=ls,
                      label=label)
        tc = [r for r in a["train_curve"] if r.get("rollout/format_valid") is not None]
        if tc:  # the trl arm logs neither (TRL's own logs have no format validity or vLLM gap)
            ax[1, 0].plot([r["step"] for r in tc], [r["rollout/format_valid"] for r in tc], marker=".", color=c,
                          ls=ls, label=f"{label} (sampled)")
            ax[1, 1].plot([r["step"] for r in tc], [r.get("rollout/logprob_gap") for r in tc], marker=".",
                          color=c, ls=ls, label=label)
        if a.get("untrained"):
            ax[0, 0].scatter([-0.4], [a["untrained"]["format_valid"]], marker="x", color=c)
    ax[0, 0].axhline(target, ls=":", color="grey", lw=1, label=f"target {target}")
    fixed = next((a["best_fixed_route"] for a in arms.values() if a.get("best_fixed_route")), None)
    if fixed:
        ax[0, 1].axhline(fixed["mean_reward"], ls=":", color="grey", lw=1,
                         label=f"best fixed route ({fixed['route']})")
    ax[0, 0].set_title("held-out format validity (greedy; step 0 = cold start, x = untrained)")
    ax[0, 1].set_title("held-out mean Router-R1 reward")
    ax[1, 0].set_title("sampled format validity per RL step")
    ax[1, 1].set_title("rollout/logprob_gap: |learner - vLLM| per token")
    ax[1, 1].set_yscale("log")
    _save(fig, ax.flat, path)


def _save(fig: Any, axes: Any, path: Path) -> None:
    """RL steps on every x axis, legends, then the PNG."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    for a in axes:
        a.set_xlabel("RL step")
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sanity(arm: dict[str, Any], path: Path) -> None:
    """The sanity arm (no cold start, graded format reward alone): sampled reward, answered share and
    format validity per RL step, and the held-out greedy validity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tc, hc = arm["train_curve"], arm["held_out_curve"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    ax[0].plot([r["step"] for r in tc], [r["reward/total"] for r in tc], marker="o", label="graded format reward")
    ax[0].set_title("sampled graded format reward per RL step (valid = 0)")
    ax[1].plot([r["step"] for r in tc], [r.get("rollout/format_valid") for r in tc], marker=".",
               label="sampled format validity")
    if any("rollout/answered" in r for r in tc):
        ax[1].plot([r["step"] for r in tc], [r.get("rollout/answered") for r in tc], marker=".", ls="--",
                   label="sampled: ends in <answer>")
    ax[1].plot([r["step"] for r in hc], [r["eval/format_valid"] for r in hc], marker="s",
               label="held-out format validity (greedy)")
    ax[1].set_ylim(-0.02, 1.02)
    ax[1].set_title("format validity, no cold start")
    _save(fig, ax, path)


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
    ap.add_argument("--from-report", nargs="*", default=[], metavar="ARM=REPORT",
                    help="record an arm from a finished job's report.json (the job run by hand with the arm's "
                         "overrides) instead of running it")
    ap.add_argument("--keep-arms", action="store_true",
                    help="keep arms of the results file that this run does not run, each labelled with the command "
                         "and date of the run that measured it")
    args = ap.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    given = dict(x.split("=", 1) for x in args.from_report if "=" in x)
    if len(given) != len(args.from_report):
        ap.error(f"--from-report: ARM=REPORT pairs, got {args.from_report}")
    arms = [a for a in arms if a not in given] + list(given)
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"--arms: unknown {sorted(unknown)}; known: {sorted(ARMS)}")
    shared = [f"train.total_steps={args.steps}", f"train.eval_every={args.eval_every}", *args.set]
    if args.quick:
        shared = ["debug=cpu", "eval.num_questions=2", *shared]
    from rlrouter.trainer.job import run

    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    start: list[str] = []
    for arm in arms:
        if arm in given:
            results[arm] = from_report(Path(given[arm]), args.target)
            continue
        run_name = f"bench_learning_{arm}{'_quick' if args.quick else ''}"
        overrides = [*shared, *ARMS[arm], *start, f"run_name={run_name}"]
        print(f"[learning] arm {arm}: {' '.join(overrides)}", flush=True)
        if arm == "trl":
            if not any(o.startswith("train.init_from=") for o in overrides):
                ap.error("--arms: trl starts from a cold-start checkpoint: --set train.init_from=..., or "
                         "--share-cold-start after an arm of ours")
            results[arm] = {"overrides": overrides, **run_trl(overrides, args.steps, args.eval_every, args.target)}
            print(f"[learning] trl: cold start {results[arm]['cold_start']}, final {results[arm]['final']}, "
                  f"time to {args.target}: {results[arm]['time_to_target']}", flush=True)
            continue
        if any(o.startswith("train.init_from=") and run_name in o for o in overrides):
            ap.error(f"train.init_from: {run_name}'s own folder is cleared before the arm runs; copy the start elsewhere")
        shutil.rmtree(ROOT / "outputs" / run_name, ignore_errors=True)  # the arm's last run: the job refuses to reuse it
        report = run(compose(overrides))
        results[arm] = {"overrides": overrides, **summarize(report, args.target),
                        "learner": {k: report["config"]["learner"].get(k) for k in ("lr", "lr_warmup_steps", "algo")}}
        if args.share_cold_start and not start:
            cold = ROOT / "outputs" / run_name / "checkpoints" / "step_000000"
            start = [f"train.init_from={cold}", "eval.untrained=false"]
            results[arm]["cold_start_checkpoint"] = str(cold)
        s = results[arm]
        print(f"[learning] {arm}: cold start {s['cold_start']}, final {s['final']}, "
              f"time to {args.target}: {s['time_to_target']}", flush=True)
    name = "router_r1_learning_quick" if args.quick else "router_r1"
    path = RESULTS / f"{name}.json"
    full = json.loads(path.read_text()) if path.exists() else {}
    old = full.get("learning") or {}
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for res in results.values():
        if "measured_in" not in res:  # an arm from --from-report was measured when its job wrote the report
            res["measured"] = now
    if args.keep_arms:
        for arm, res in (old.get("arms") or {}).items():
            if arm not in results and isinstance(res, dict) and "held_out_curve" in res:
                results[arm] = {**res, "measured_in": res.get("measured_in") or old.get("command")}
    if "trl" in results and "grpo" in results:
        results["time_to_quality"] = time_to_quality(results["grpo"], results["trl"], args.target)
        results["time_to_quality"]["same_invocation"] = results["grpo"].get("measured") == results["trl"].get("measured")
        print(f"[learning] time to quality, ours vs TRL: {results['time_to_quality']}", flush=True)
    section = {"what": "held-out learning curves of the main job (cold start, then RL), arm by arm, one run",
               "command": "python benchmarks/bench_learning.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "target_format_valid": args.target, "arms": results, "wall_s": time.perf_counter() - t_all}
    RESULTS.mkdir(parents=True, exist_ok=True)
    section["date"] = now
    full["learning"] = section
    write_result(path, full, MEASURES, indent=2)
    plot(results, RESULTS / f"{'router_r1_learning_quick' if args.quick else 'router_r1_learning'}.png", args.target)
    if isinstance(results.get("sanity"), dict):
        plot_sanity(results["sanity"], RESULTS / f"router_r1_sanity{'_quick' if args.quick else ''}.png")
    print(f"[learning] wrote {path}", flush=True)
    return section


if __name__ == "__main__":
    main()
