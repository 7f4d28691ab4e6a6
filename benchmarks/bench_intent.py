"""Intent classifier: supervised vs PPO fine-tuning on a held-out MMLU split.

    python benchmarks/bench_intent.py               # the main run: supervised_then_rl, Ray Train, 2 workers
    python benchmarks/bench_intent.py --variants    # + PPO variants (rl_only from the same supervised adapter)

Composes ``conf/train_intent.yaml`` (plus the overrides printed in the JSON) and calls
``rlrouter.intent.job.run``, the function ``jobs/train_intent.py`` wraps. Writes
``benchmarks/results/intent.json`` and ``intent.png``; the adapters of the run go to ``outputs/bench_intent``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_intent.py", "rlrouter/intent", "conf/train_intent.yaml", "conf/intent")
RESULTS = ROOT / "benchmarks" / "results"
RUN_DIR = ROOT / "outputs" / "bench_intent"

# The main run: MMLU defaults of conf/intent/data/mmlu.yaml (60 train / 15 val / 40 test per category),
# sized to finish in about 10 minutes on 2 shared CPU cores.
MAIN = ["mode=supervised_then_rl"]

# What else PPO was tried with, each from the main run's supervised adapter (rl_only).
VARIANTS = {
    "rl lr=1e-4": ["rl_training.learning_rate=1e-4"],
    "rl calibration reward": ["rl_training.reward_metric=calibration"],
    "rl f1 (leave-one-out) lr=1e-4": ["rl_training.learning_rate=1e-4",
                                      "rl_training.reward_metric={name: macro_f1, mode: leave_one_out}"],
}


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_intent", overrides=overrides)


def plot(result: dict, variants: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    sup = result["history"].get("supervised", [])
    if sup:
        axes[0].plot([r["step"] for r in sup], [r["val/loss"] for r in sup], "o-", label="val loss")
        axes[0].plot([r["step"] for r in sup], [r["train/loss"] for r in sup], "s--", label="train loss")
        axes[0].set_xlabel("step")
        axes[0].set_title("supervised (cross-entropy)")
        axes[0].legend()
    curves = {"rl (main)": result["history"].get("rl", [])}
    curves.update({k: v["history"].get("rl", []) for k, v in variants.items()})
    for name, rl in curves.items():
        if rl:
            axes[1].plot([r["iteration"] for r in rl], [r["rollout/accuracy"] for r in rl], "o-", label=name)
    axes[1].set_xlabel("PPO iteration")
    axes[1].set_title("rollout accuracy (sampled labels)")
    axes[1].legend(fontsize=7)
    rows = {**result["table"], **{k: v["table"]["rl"] for k, v in variants.items()}}
    names = list(rows)
    x = range(len(names))
    w = 0.27
    for j, metric in enumerate(["accuracy", "macro_f1", "ece"]):
        axes[2].bar([i + (j - 1) * w for i in x], [rows[n][metric] for n in names], w, label=metric)
    axes[2].set_xticks(list(x))
    axes[2].set_xticklabels(names, rotation=20, ha="right", fontsize=7)
    axes[2].set_title("held-out test split")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def reevaluate(run_dir: Path) -> dict:
    """The main run's result with its table measured again (same adapters, same held-out split)."""
    from rlrouter.config import typed_config
    from rlrouter.intent.job import IntentJobConfig, build_splits, evaluate_adapters, format_table

    result = json.loads((run_dir / "metrics.json").read_text())
    from rlrouter.intent.job import EvalConfig

    job = typed_config(IntentJobConfig, result["config"])
    job.eval = EvalConfig()  # this version's timing protocol (round-robin, median)
    splits = build_splits(job.data, job.seed)
    adapters = run_dir / "adapters"
    result["table"] = evaluate_adapters({p: adapters / p for p in ("supervised", "rl")}, splits.test,
                                        list(splits.labels), job.eval)
    result["table_markdown"] = format_table(result["table"])
    (run_dir / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def retime() -> None:
    """Measure every adapter of intent.json again in one round-robin pass (the machine is shared: rows
    timed in separate runs saw different loads), then rewrite the table. Quality metrics are recomputed
    too; they must not change."""
    from rlrouter.config import typed_config
    from rlrouter.intent.job import EvalConfig, IntentJobConfig, build_splits, evaluate_adapters, format_table

    out = RESULTS / "intent.json"
    doc = json.loads(out.read_text())
    job = typed_config(IntentJobConfig, doc["main"]["config"])
    job.eval = EvalConfig()
    splits = build_splits(job.data, job.seed)
    dirs = {"supervised": RUN_DIR / "main" / "adapters" / "supervised", "rl": RUN_DIR / "main" / "adapters" / "rl"}
    for name in doc["variants"]:
        slug = name.replace(" ", "_").replace("=", "").replace("(", "").replace(")", "")
        dirs[name] = RUN_DIR / slug / "adapters" / "rl"
    t0 = time.perf_counter()
    rows = evaluate_adapters(dirs, splits.test, list(splits.labels), job.eval)
    old = {**doc["main"]["table"], **{k: v["table"]["rl"] for k, v in doc["variants"].items()}}
    for name, row in rows.items():
        for m in ("accuracy", "macro_f1", "ece"):
            if abs(row[m] - old[name][m]) > 1e-9:
                raise RuntimeError(f"{name}: {m} changed on re-evaluation ({old[name][m]} -> {row[m]})")
    doc["table"] = rows
    doc["table_markdown"] = format_table(rows)
    doc["timing_note"] = ("ms columns re-measured together, round-robin over all adapters, median of "
                          f"{job.eval.timing_rounds} rounds (python benchmarks/bench_intent.py --retime, "
                          f"{time.perf_counter() - t0:.0f} s, load average {os.getloadavg()[0]:.1f} at the end)")
    write_result(out, doc, MEASURES, indent=1, default=str)
    print(doc["table_markdown"])
    print(doc["timing_note"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", action="store_true", help="also run the PPO variants (rl_only)")
    ap.add_argument("--skip-main", action="store_true",
                    help="reuse the main run's adapters in outputs/bench_intent/main (re-evaluated, not retrained)")
    ap.add_argument("--no-ray", action="store_true", help="train in this process instead of Ray Train")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    ap.add_argument("--retime", action="store_true", help="re-time all adapters of intent.json together, then exit")
    args = ap.parse_args()
    if args.retime:
        retime()
        return
    from rlrouter.intent.job import run

    extra = [*args.overrides, *(["resources=in_process"] if args.no_ray else [])]
    t0 = time.perf_counter()
    main_overrides = [*MAIN, *extra, f"output_dir={RUN_DIR / 'main'}"]
    if args.skip_main:
        result = reevaluate(RUN_DIR / "main")
    else:
        result = run(compose(main_overrides))
    variants = {}
    if args.variants:
        for name, ov in VARIANTS.items():
            slug = name.replace(" ", "_").replace("=", "").replace("(", "").replace(")", "")
            v_over = ["mode=rl_only", f"init_from={RUN_DIR / 'main'}", *ov, *extra, f"output_dir={RUN_DIR / slug}"]
            variants[name] = {"overrides": v_over, **run(compose(v_over))}
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = {**result["table"], **{k: v["table"]["rl"] for k, v in variants.items()}}
    from rlrouter.intent.job import format_table

    doc = {
        "command": "python benchmarks/bench_intent.py" + (" --variants" if args.variants else "")
                   + (" --skip-main" if args.skip_main else "")
                   + (" --no-ray" if args.no_ray else "") + "".join(f" {o}" for o in args.overrides),
        "equivalent_job": "python jobs/train_intent.py " + " ".join(o for o in main_overrides if not o.startswith("output_dir")),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "wall_s": time.perf_counter() - t0,
        "main": {k: result[k] for k in ("mode", "table", "splits", "train_wall_s", "total_wall_s", "summary",
                                        "history", "config")},
        "variants": {k: {"overrides": v["overrides"], "table": v["table"], "summary": v["summary"],
                         "history": v["history"], "train_wall_s": v["train_wall_s"]} for k, v in variants.items()},
        "table_markdown": format_table(rows),
    }
    out = RESULTS / "intent.json"
    tmp = out.with_suffix(".json.tmp")
    write_result(tmp, doc, MEASURES, indent=1, default=str)
    tmp.replace(out)
    plot(result, variants, RESULTS / "intent.png")
    print(doc["table_markdown"])
    print(f"wrote {out} and {RESULTS / 'intent.png'} in {doc['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
