"""Every router over RouterBench's 11 LLMs, side by side: AIQ per task against the zero router.

    python benchmarks/bench_many_models.py            # the whole evaluation (eval=routerbench), a few minutes
    python benchmarks/bench_many_models.py --quick    # two routers, 100 resamples: a smoke run
    python benchmarks/bench_many_models.py --only knn,escalate   # these routers only, merged into many_models.json
    python benchmarks/bench_many_models.py --render   # docs/many_models.md's table from the committed JSON
    python benchmarks/bench_many_models.py --router-r1 outputs/rb_scale_grpo_v3/report.json   # a Router-R1 run's row

Runs ``jobs/evaluate_router.py eval=routerbench``'s job (``rlrouter.eval.pool_job.run_pool``): every router's
settings are chosen by cross-validation on the train tables, then the test tables are read once and the
reading is appended to ``benchmarks/results/test_ledger.jsonl``. Writes ``benchmarks/results/many_models.json``
(per router ``aiq``, ``aiq_minus_zero: {overall: {mean, lo, hi}, <task>: ...}``, the curves, the settings chosen
and their cross-validation scores), ``many_models.md`` and ``many_models.png`` (one panel a task). A quick run
writes ``many_models_quick.*`` and never replaces the full result. A run with ``--only`` reads the test tables for
those routers (a ledger entry of its own) and merges their entries into the committed ``many_models.json``,
keeping every other router's, then renders the Markdown, the PNG and the doc's table from the merged file.
``--router-r1 REPORT`` reads nothing: it copies a trained Router-R1 run's held-out routing figures
(``rlrouter.trainer.report.routing_summary``: policy minus best fixed route and minus per-task rule, call shares
per task, episodes) from its ``report.json`` into ``many_models.json``'s ``router_r1`` section, under the run's
name. Those figures are on the run's own held-out questions and on Router-R1's reward at the run's alpha, not AIQ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from rlrouter.config import to_plain_dict
from rlrouter.eval.pool_job import run_pool
from rlrouter.eval.pool_report import aiq_table, pool_markdown, replace_doc_block
from rlrouter.trainer.report import routing_summary

ROOT = Path(__file__).resolve().parents[1]

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_many_models.py", "rlrouter/eval", "rlrouter/data/routerbench.py", "conf/eval",
            "conf/evaluate_router.yaml")
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "many_models.md"  # its AIQ table is rendered from many_models.json


def plot(report: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(report["data"]["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for c, s in report["single_models"].items():
            ax.scatter([s[task]["cost_per_1k"]], [s[task]["quality"]], s=18, color="k", zorder=5)
        for name, r in report["routers"].items():
            curve = r["curve"][task]
            style = {"ls": "--", "color": "k"} if r["type"] == "fixed" else ({"ls": ":", "color": "grey"}
                                                                              if r.get("reads_outcomes") else {})
            iv = r["aiq_minus_zero"][task]
            ax.plot([1000 * c for c in curve["cost"]], curve["quality"], marker=".", ms=3, **style,
                    label=f"{name}: {r['aiq'][task]:.3f} ({iv['mean']:+.3f} [{iv['lo']:+.3f}, {iv['hi']:+.3f}])")
        ax.set_xscale("log")
        ax.set_title(f"{task} ({report['data']['tasks'][task]} test prompts)")
        ax.set_xlabel("mean cost, USD per 1,000 prompts (log)")
        ax.set_ylabel("quality")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right", title="AIQ (minus zero router, 95% CI)", title_fontsize=6)
    fig.suptitle("RouterBench, 11 LLMs: hull of each router's settings on the test tables")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# The table as first measured (RouterBench's AIQ code run on these test tables): the figures our
# reimplementation must give under RouterBench's own conventions (blank cells read as wrong, AIQ over costs
# from 0 to the dearest model's, kNN priced by each model's mean cost, the oracle swept by willingness to pay).
PUBLISHED = {"zero_router": {"arc-challenge": 0.899, "mbpp": 0.680, "winogrande": 0.774},
             "knn40": {"arc-challenge": 0.888, "mbpp": 0.680, "winogrande": 0.777},
             "knn10": {"arc-challenge": 0.868, "mbpp": 0.671, "winogrande": 0.721},
             "oracle": {"arc-challenge": 0.963, "mbpp": 0.861, "winogrande": 0.976}}


def routerbench_check(out_dir: Path) -> dict:
    """Our AIQ against RouterBench's published points, under RouterBench's conventions (see PUBLISHED)."""
    overrides = ["eval=routerbench", f"output_dir={out_dir}", "eval.blank_scores=zero", "eval.repeated_ids=keep",
                 "eval.overlap=keep", "eval.aiq_range=routerbench", "eval.bootstrap.n_boot=10",
                 "eval.only=[oracle,knn,knn10]", "eval.routers.knn.select=null", "+eval.routers.knn.cost=mean",
                 "+eval.routers.knn.k=40", "+routers.knn10={type: knn, k: 10, cost: mean}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = to_plain_dict(compose(config_name="evaluate_router", overrides=overrides))
    cfg["command"] = "python benchmarks/bench_many_models.py (RouterBench-convention check)"
    rep = run_pool(cfg)
    ours = {"zero_router": rep["routers"]["zero_router"]["aiq"], "knn40": rep["routers"]["knn"]["aiq"],
            "knn10": rep["routers"]["knn10"]["aiq"], "oracle": rep["routers"]["oracle"]["aiq"]}
    return {name: {t: {"published": pub, "ours": round(ours[name][t], 3), "diff": round(ours[name][t] - pub, 3)}
                   for t, pub in tasks.items()} for name, tasks in PUBLISHED.items()}


def merge_routers(committed: dict, run: dict) -> dict:
    """``committed`` with ``run``'s routers added or replaced (the zero router's entry is the same in both:
    the same test tables, its settings chosen on the same train tables); the runs' commands and times kept."""
    if committed["data"]["test"] != run["data"]["test"] or committed["data"]["tasks"] != run["data"]["tasks"]:
        raise SystemExit("--only: this run read other test tables than the committed many_models.json; "
                         "run the whole benchmark instead")
    merged = {**committed, "routers": {**committed["routers"], **run["routers"]}}
    merged["merged_runs"] = [*committed.get("merged_runs", []),
                             {"command": run.get("command"), "routers": sorted(set(run["routers"]) - {"zero_router"}),
                              "bench_seconds": run.get("bench_seconds")}]
    return merged


def router_r1_entry(path: Path) -> tuple[str, dict]:
    """A trained Router-R1 run's ``report.json`` as (its run name, its ``router_r1`` entry): the routing summary,
    where it came from and the run's own provenance (command, date, commit at its start)."""
    run = json.loads(path.read_text())
    name = (run.get("config") or {}).get("run_name") or path.parent.name
    if "provenance" not in run:
        raise SystemExit(f"--router-r1 {path}: the report has no provenance block (command, date, commit)")
    return name, {**routing_summary(run), "report": str(path), "provenance": run["provenance"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="per_task and knn only, 100 resamples")
    ap.add_argument("--only", default="", help="comma-separated router names of eval=routerbench")
    ap.add_argument("--out", default=str(RESULTS), help="folder for many_models.{json,md,png}")
    ap.add_argument("--render", action="store_true",
                    help="only re-render docs/many_models.md's AIQ table and the PNG from the committed JSON")
    ap.add_argument("--router-r1", default="", metavar="REPORT",
                    help="a Router-R1 run's report.json: merge its held-out routing figures into many_models.json")
    args = ap.parse_args(argv)
    if args.router_r1:  # the AIQ figures' provenance stays theirs; the run's entry carries its own
        target = Path(args.out) / "many_models.json"
        report = json.loads(target.read_text())
        name, entry = router_r1_entry(Path(args.router_r1))
        report.setdefault("router_r1", {})[name] = entry
        target.write_text(json.dumps(report, indent=2) + "\n")
        print(f"bench_many_models: {target} router_r1.{name}: minus best fixed {entry['policy_minus_best_fixed']}, "
              f"minus per-task {entry['policy_minus_per_task']}, {entry['episodes']} episodes")
        return 0
    if args.render:
        report = json.loads((RESULTS / "many_models.json").read_text())
        plot(report, RESULTS / "many_models.png")
        replace_doc_block(DOC, "many_models aiq", aiq_table(report))
        return 0
    overrides = ["eval=routerbench", f"output_dir={ROOT / 'outputs' / 'bench_many_models'}"]
    if args.quick:
        overrides += ["eval.only=[per_task,knn]", "eval.bootstrap.n_boot=100"]
    elif args.only:
        overrides += [f"eval.only=[{args.only}]"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = to_plain_dict(compose(config_name="evaluate_router", overrides=overrides))
    cfg["command"] = " ".join(["python benchmarks/bench_many_models.py", *(argv if argv is not None else sys.argv[1:])])
    t0 = time.perf_counter()
    report = run_pool(cfg)
    report["bench_seconds"] = round(time.perf_counter() - t0, 1)
    stem = "many_models_quick" if args.quick else "many_models"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.pop("paths", None)
    if not args.quick and not args.only:
        report["routerbench_check"] = routerbench_check(ROOT / "outputs" / "bench_many_models_rb_check")
    if args.only and (out / f"{stem}.json").exists():
        report = merge_routers(json.loads((out / f"{stem}.json").read_text()), report)
        (out / f"{stem}.md").write_text(pool_markdown(report))
    else:
        shutil.copyfile(Path(cfg["output_dir"]) / "report.md", out / f"{stem}.md")
    write_result(out / f"{stem}.json", report, MEASURES, indent=2)
    plot(report, out / f"{stem}.png")
    if not args.quick and out == RESULTS:
        replace_doc_block(DOC, "many_models aiq", aiq_table(report))
    print(f"bench_many_models: {out / stem}.{{json,md,png}} in {report['bench_seconds']} s")
    for name, tasks in (report.get("routerbench_check") or {}).items():
        print(f"  RouterBench check {name:12s} " + "  ".join(f"{t} {v['ours']:.3f} (published {v['published']:.3f})"
                                                             for t, v in tasks.items()))
    for name, r in sorted(report["routers"].items(), key=lambda kv: -kv[1]["aiq"]["overall"]):
        iv = r["aiq_minus_zero"]["overall"]
        print(f"  {name:14s} AIQ {r['aiq']['overall']:.3f}  minus zero {iv['mean']:+.3f} [{iv['lo']:+.3f}, {iv['hi']:+.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
