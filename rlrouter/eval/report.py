"""Write an evaluation report: ``report.json``, a markdown table and the PNGs.

The PNGs: ``cost_quality_<slice>.png`` holds every router and baseline of a slice in one figure (left:
quality against mean USD cost per prompt; right: against the share of strong calls, RouteLLM's axis),
threshold routers as curves and the others as points; ``call_shares.png`` shows each router's share
of calls per candidate on the whole test split.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

COLUMNS = ("router", "quality", "$ / 1k prompts", "strong calls", "PGR", "random @ same cost", "APGR",
           "CPT(50%)", "CPT(80%)", "AIQ")


def _fmt(x: Any, pct: bool = False, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if pct:
        return f"{100 * x:.1f}%"
    return f"{x:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    """One table per slice (all, then per task), rows sorted by quality, plus the OPE table."""
    data = report["data"]
    strong, weak = data["strong"], data["weak"]
    lines = [f"# Router evaluation", "",
             f"Test split: {data['test']} prompts ({data['train']} train), candidates: weak = `{weak}`, "
             f"strong = `{strong}`. Quality is mean logged score; cost in USD per 1,000 prompts. "
             "APGR, CPT and AIQ come from the threshold sweep and exist only for threshold routers; "
             "AIQ is normalised over the cost range from always-weak to always-strong.", ""]
    for sname, sl in report["slices"].items():
        lines += [f"## {sname} ({sl['n']} prompts)", "", "| " + " | ".join(COLUMNS) + " |",
                  "|" + "---|" * len(COLUMNS)]
        rows = sorted(sl["routers"].items(), key=lambda kv: -kv[1]["quality"])
        for name, r in rows:
            lines.append("| " + " | ".join([
                name, _fmt(r["quality"]), _fmt(1000 * r["cost_mean"], digits=2), _fmt(r["shares"][strong], pct=True),
                _fmt(r["pgr"]), _fmt(r["random_quality_at_cost"]), _fmt(r["apgr"]),
                _fmt(r["cpt50"], pct=True), _fmt(r["cpt80"], pct=True), _fmt(r["aiq"])]) + " |")
        lines.append("")
    ope = report.get("ope")
    if ope:
        lines += [f"## Off-policy estimates (log: epsilon-soft over `{ope['logging_base']}`, "
                  f"epsilon = {ope['epsilon']}, {int(100 * ope['level'])}% {ope['ci']} intervals)", "",
                  "| router | true quality | IPS | SNIPS | DR |", "|---|---|---|---|---|"]
        for name, r in ope["routers"].items():
            cells = []
            for e in ("ips", "snips", "dr"):
                x = r[e]
                cells.append(f"{x['value']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]{'' if x['covers'] else ' ✗'}")
            lines.append(f"| {name} | {r['true']:.3f} | " + " | ".join(cells) + " |")
        lines += ["", "✗: the true replayed quality lies outside the interval.", ""]
    return "\n".join(lines)


def plot_cost_quality(report: dict[str, Any], sname: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sl = report["slices"][sname]
    strong = report["data"]["strong"]
    fig, (ax_c, ax_s) = plt.subplots(1, 2, figsize=(13, 5))
    markers = "osD^v<>ph*"
    for i, (name, r) in enumerate(sl["routers"].items()):
        if "curve" in r:
            c = r["curve"]
            ax_c.plot([1000 * x for x in c["cost_mean"]], c["quality"], marker=".", label=name)
            ax_s.plot([100 * x for x in c["strong_share"]], c["quality"], marker=".", label=name)
            ax_c.scatter([1000 * r["cost_mean"]], [r["quality"]], marker="x", color="k", zorder=5)
        else:
            mk = markers[i % len(markers)]
            ax_c.scatter([1000 * r["cost_mean"]], [r["quality"]], marker=mk, s=60, label=name, zorder=4)
            ax_s.scatter([100 * r["shares"][strong]], [r["quality"]], marker=mk, s=60, label=name, zorder=4)
        if "optimal_curve" in r:
            oc = r["optimal_curve"]
            ax_s.plot([100 * x for x in oc["strong_share"]], oc["quality"], ls=":", color="grey",
                      label="optimal at each share")
    for ax in (ax_c, ax_s):
        ax.axhline(sl["weak"]["quality"], color="grey", ls="--", lw=0.8)
        ax.axhline(sl["strong"]["quality"], color="red", ls="--", lw=0.8)
        ax.set_ylabel("quality (mean logged score)")
        ax.grid(alpha=0.3)
    ax_c.set_xlabel("mean cost, USD per 1,000 prompts")
    ax_s.set_xlabel("calls to the strong candidate (%)")
    ax_s.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Cost-quality on {sname} ({sl['n']} test prompts); x: operating points of threshold routers")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_call_shares(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sl = report["slices"]["all"]
    routers = list(sl["routers"])
    cands = [c["name"] for c in report["data"]["candidates"]]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(routers) + 1.5))
    left = [0.0] * len(routers)
    for cand in cands:
        vals = [sl["routers"][r]["shares"][cand] for r in routers]
        ax.barh(routers, vals, left=left, label=cand)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of calls")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="candidate")
    ax.set_title(f"Call shares per router ({sl['n']} test prompts)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _json_default(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def write_json_and_markdown(out_dir: Path, report: dict[str, Any], md: str) -> dict[str, Path]:
    """``report.json`` (written whole, then renamed: a reader never sees half a file) and ``report.md``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report.json": out_dir / "report.json", "report.md": out_dir / "report.md"}
    tmp = paths["report.json"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, default=_json_default, allow_nan=True))
    tmp.replace(paths["report.json"])
    paths["report.md"].write_text(md)
    return paths


def write_report(out_dir: Path, report: dict[str, Any]) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = write_json_and_markdown(out_dir, report, markdown(report))
    for sname in report["slices"]:
        paths[f"cost_quality_{sname}.png"] = plot_cost_quality(report, sname, out_dir / f"cost_quality_{sname}.png")
    paths["call_shares.png"] = plot_call_shares(report, out_dir / "call_shares.png")
    return paths
