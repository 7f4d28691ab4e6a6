"""Evaluate a Router-R1 policy on held-out questions against simple baselines, and plot the run.

The policy's score: exact match of its final answer, format validity, and the USD cost of its route
calls. Baselines route every question to one candidate through the same pool (always-cheapest,
always-strongest, random), so every number comes from the same replayed or live calls.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlrouter.rewards.router_r1 import RouterR1FormatReward, exact_match


def policy_summary(trajs: Sequence[Any], candidates: Sequence[str]) -> dict[str, Any]:
    fmt = RouterR1FormatReward(list(candidates))([t.item["query"] for t in trajs], [t.text for t in trajs])
    em = [exact_match(t.answer or "", list(t.item["ground_truth"])) if t.answer else 0.0 for t in trajs]
    calls = Counter(r.model for t in trajs for r in t.routes)
    total = sum(calls.values())
    return {"n": len(trajs), "accuracy": float(np.mean(em)) if em else 0.0,
            "format_valid": float(np.mean([f == 0 for f in fmt])) if fmt else 0.0,
            "cost_per_query": float(np.mean([t.cost for t in trajs])) if trajs else 0.0,
            "calls_per_query": total / max(1, len(trajs)),
            "route_share": {c: calls.get(c, 0) / total if total else 0.0 for c in candidates}}


def held_out_summary(trajs: Sequence[Any], candidates: Sequence[str], alpha: float, cost_window: int = 512,
                     metric: str = "em") -> dict[str, Any]:
    """``policy_summary`` plus the mean Router-R1 reward as training scores it (a fresh cost window, so
    every evaluation of a run scales costs the same way)."""
    from rlrouter.learner.loop import score_trajectories
    from rlrouter.rewards.router_r1 import RouterR1Reward

    reward = RouterR1Reward(alpha, candidates=list(candidates), cost_window=cost_window, metric=metric)
    scores = score_trajectories(reward, trajs)
    return {**policy_summary(trajs, candidates),
            "mean_reward": float(np.mean([s.total for s in scores])) if scores else 0.0,
            "format_reward_mean": float(np.mean([s.format for s in scores])) if scores else 0.0}


def baseline_summaries(pool: Any, items: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, dict[str, Any]]:
    """always-cheapest, always-strongest (largest) and random, answered by the pool on the real questions."""
    cands = [pool.get(n) for n in pool.names]
    cheapest = min(cands, key=lambda c: (c.price_in + c.price_out, c.name)).name
    strongest = max(cands, key=lambda c: (c.params_b, c.price_out, c.name)).name
    rng = random.Random(seed)
    plans = {"always_cheapest": [cheapest] * len(items), "always_strongest": [strongest] * len(items),
             "random": [rng.choice(pool.names) for _ in items]}
    out = {}
    for name, models in plans.items():
        resps = pool.route_sync([(m, it["query"]) for m, it in zip(models, items)])
        acc = []
        for it, r in zip(items, resps):
            if r.correct is not None:
                acc.append(float(r.correct))
            else:
                acc.append(exact_match(r.text, list(it["ground_truth"])))
        share = Counter(models)
        out[name] = {"n": len(items), "accuracy": float(np.mean(acc)) if acc else 0.0, "format_valid": 1.0,
                     "cost_per_query": float(np.mean([r.cost for r in resps])) if resps else 0.0,
                     "calls_per_query": 1.0, "errors": sum(not r.ok for r in resps),
                     "route_share": {c: share.get(c, 0) / len(items) for c in pool.names}}
    return out


def plot_held_out(metrics: list[dict[str, Any]], out_dir: str | Path, baselines: dict[str, dict[str, Any]] | None = None,
                  name: str = "held_out_curve.png") -> str | None:
    """The held-out curve of a run (``eval/...`` rows; step 0 is the cold-start level): greedy format
    validity and accuracy on the left, mean reward on the right. None when the run evaluated nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = [m for m in metrics if "eval/format_valid" in m]
    if not rows:
        return None
    steps = [m["step"] for m in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(steps, [m["eval/format_valid"] for m in rows], marker="o", label="format valid")
    ax[0].plot(steps, [m["eval/accuracy"] for m in rows], marker="s", label="accuracy (EM)")
    ax[0].set_ylim(-0.05, 1.05)
    ax[1].plot(steps, [m["eval/mean_reward"] for m in rows], marker="o", color="C2", label="mean reward")
    for k, (bname, b) in enumerate((baselines or {}).items()):
        if "accuracy" in b:
            ax[0].axhline(b["accuracy"], ls=":", lw=1, color=f"C{3 + k}", label=f"{bname} accuracy")
    for a, title in zip(ax, ("held-out format and accuracy", "held-out mean reward")):
        a.set_xlabel("RL step (0 = after the cold start)"), a.set_title(title), a.legend(fontsize=8)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    p = Path(out_dir) / name
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)


def plot_run(metrics: list[dict[str, Any]], results: dict[str, dict[str, Any]], out_dir: str | Path) -> list[str]:
    """reward_curve.png, route_shares.png, accuracy_vs_cost.png under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths = []
    if metrics:
        steps = [m["step"] for m in metrics]
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        for key in ("reward/total", "reward/format", "reward/outcome"):
            ax[0].plot(steps, [m.get(key, np.nan) for m in metrics], marker="o", label=key)
        ax[0].set_xlabel("step"), ax[0].set_title("reward"), ax[0].legend(fontsize=8)
        ax[1].plot(steps, [m.get("rollout/format_valid", np.nan) for m in metrics], marker="o", label="format valid")
        ax[1].plot(steps, [m.get("rollout/em", np.nan) for m in metrics], marker="o", label="EM")
        ax[1].set_ylim(-0.05, 1.05), ax[1].set_xlabel("step"), ax[1].set_title("rollout"), ax[1].legend(fontsize=8)
        fig.tight_layout()
        p = out / "reward_curve.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(str(p))
    names = list(results)
    cands = sorted({c for r in results.values() for c in r.get("route_share", {})})
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 3.6))
    bottom = np.zeros(len(names))
    for c in cands:
        vals = np.array([results[n]["route_share"].get(c, 0.0) for n in names])
        ax.bar(names, vals, bottom=bottom, label=c)
        bottom += vals
    ax.set_ylabel("share of calls"), ax.set_title("route shares"), ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    p = out / "route_shares.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for n in names:
        ax.scatter(results[n]["cost_per_query"], results[n]["accuracy"], s=60)
        ax.annotate(n, (results[n]["cost_per_query"], results[n]["accuracy"]), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("mean cost per query (USD)"), ax.set_ylabel("accuracy (EM)"), ax.set_title("accuracy vs cost")
    fig.tight_layout()
    p = out / "accuracy_vs_cost.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
    return paths


def write_report(out_dir: str | Path, report: dict[str, Any]) -> Path:
    p = Path(out_dir) / "report.json"
    p.write_text(json.dumps(report, indent=2, default=str))
    return p
