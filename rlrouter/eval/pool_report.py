"""Write a pool evaluation's report: ``report.json``, ``report.md`` and ``cost_quality_<task>.png``.

Each PNG shows one task: the single models as points, the zero router (their hull) dashed, and every
router's hull of its settings; the oracle dotted. The markdown holds the AIQ table (per task and overall,
with the paired interval against the zero router) and, per price weight, each router's reward and cost.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlrouter.eval.report import write_json_and_markdown


def _interval(x: dict[str, float]) -> str:
    return f"{x['mean']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"


def aiq_table(report: dict[str, Any]) -> str:
    """The AIQ table, one row a router, best first: per task, overall, and overall minus the zero router's
    with its interval. The docs quote it as rendered here (tests/test_doc_figures.py)."""
    tasks = list(report["data"]["tasks"])
    routers = report["routers"]
    head = ["router", *tasks, "overall", "overall - zero router"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in sorted(routers, key=lambda n: -routers[n]["aiq"]["overall"]):
        r = routers[name]
        label = f"{name} (reads test outcomes)" if r.get("reads_outcomes") else name
        lines.append("| " + " | ".join([label, *[f"{r['aiq'][t]:.3f}" for t in tasks], f"{r['aiq']['overall']:.3f}",
                                        _interval(r["aiq_minus_zero"]["overall"])]) + " |")
    return "\n".join(lines)


def pool_markdown(report: dict[str, Any]) -> str:
    data = report["data"]
    tasks = list(data["tasks"])
    routers = report["routers"]
    span = ("the costs from 0 to the dearest single model's (RouterBench's convention)"
            if report["aiq_range"]["convention"] == "routerbench" else "the costs from the cheapest to the dearest single model's")
    lines = ["# Router evaluation over a pool", "",
             f"Test: {data['test']} prompts ({', '.join(f'{t} {n}' for t, n in data['tasks'].items())}), "
             f"train: {data['train']}; {len(data['candidates'])} candidates. AIQ is RouterBench's area under the "
             f"non-decreasing convex hull of a router's cost-quality points, per task over {span}; overall is the "
             "mean over tasks. Intervals: "
             f"{int(100 * report['bootstrap']['level'])}% paired bootstrap over test prompts "
             f"({report['bootstrap']['n_boot']} resamples, stratified by task), AIQ minus the zero router's.", ""]
    if data.get("quirks"):
        lines += ["Data:", *[f"- {q}" for q in data["quirks"]], ""]
    if report.get("skipped"):
        lines += ["Not in the tables below:", *[f"- {n}: {why}" for n, why in report["skipped"].items()], ""]
    lines += ["## AIQ", "", aiq_table(report), ""]
    for lam in report["price_weights"]:
        key = f"{lam:g}"
        lines += [f"## At price weight {key} (reward = quality - {key} x cost in thousandths of a dollar)", "",
                  "| router | reward | quality | $ / 1k prompts | " + " | ".join(f"reward {t}" for t in tasks) + " |",
                  "|" + "---|" * (4 + len(tasks))]
        rows = sorted(routers, key=lambda n: -routers[n]["at_price"][key]["overall"]["reward"])
        for name in rows:
            a = routers[name]["at_price"][key]
            lines.append(f"| {name} ({a['setting']}) | {a['overall']['reward']:.3f} | {a['overall']['quality']:.3f} | "
                         f"{a['overall']['cost_per_1k']:.2f} | " + " | ".join(f"{a[t]['reward']:.3f}" for t in tasks) + " |")
        lines.append("")
    lines += ["## Single models", "", "| candidate | " + " | ".join(f"{t} quality | {t} $/1k" for t in tasks) + " |",
              "|" + "---|" * (1 + 2 * len(tasks))]
    for c, s in report["single_models"].items():
        lines.append(f"| {c} | " + " | ".join(f"{s[t]['quality']:.3f} | {s[t]['cost_per_1k']:.2f}" for t in tasks) + " |")
    lines.append("")
    return "\n".join(lines)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def plot_pool(report: dict[str, Any], task: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for c, s in report["single_models"].items():
        ax.scatter([s[task]["cost_per_1k"]], [s[task]["quality"]], s=25, color="k", zorder=5)
        ax.annotate(c.split("/")[-1], (s[task]["cost_per_1k"], s[task]["quality"]), fontsize=6,
                    xytext=(3, -8), textcoords="offset points")
    for name, r in report["routers"].items():
        curve = r["curve"][task]
        style = {"ls": "--", "color": "k"} if r["type"] == "fixed" else ({"ls": ":", "color": "grey"}
                                                                          if r.get("reads_outcomes") else {})
        ax.plot([1000 * c for c in curve["cost"]], curve["quality"], marker=".", ms=3,
                label=f"{name} (AIQ {r['aiq'][task]:.3f})", **style)
    rng = report["aiq_range"][task]
    ax.axvspan(rng["cost_min_per_1k"], rng["cost_max_per_1k"], color="grey", alpha=0.06)
    ax.set_xscale("log")
    ax.set_xlabel("mean cost, USD per 1,000 prompts (log)")
    ax.set_ylabel("quality (mean logged score)")
    ax.set_title(f"{task}: hull of each router's settings ({report['data']['tasks'][task]} test prompts)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_pool_report(out_dir: Path, report: dict[str, Any]) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = write_json_and_markdown(out_dir, report, pool_markdown(report))
    for task in report["data"]["tasks"]:
        name = f"cost_quality_{_safe(task)}.png"
        paths[name] = plot_pool(report, task, out_dir / name)
    return paths


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- begin {name} (rendered from benchmarks/results; do not edit) -->", f"<!-- end {name} -->"


def doc_block(text: str, name: str) -> str | None:
    """The text between a doc's ``name`` markers (None when the doc has none)."""
    begin, end = _markers(name)
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def replace_doc_block(path: Path, name: str, body: str) -> bool:
    """Write ``body`` between the ``name`` markers of the doc at ``path``; False when it has no markers."""
    text = Path(path).read_text(encoding="utf-8")
    begin, end = _markers(name)
    if doc_block(text, name) is None:
        return False
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    Path(path).write_text(f"{head}{begin}\n{body}\n{end}{tail}", encoding="utf-8")
    return True
