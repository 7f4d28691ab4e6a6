"""Evaluate a Router-R1 policy on held-out questions, and plot the run.

The policy's score: exact match of its final answer, format validity, the USD cost of its route calls
and its Router-R1 reward. The routes it is compared with (each fixed route, random, the per-task rule,
the oracle) are scored on the same questions and reward by ``rlrouter.eval.route_scores``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlrouter.eval.route_scores import policy_rows, summarize, task_of, trajectory_share
from rlrouter.rewards.spec import RewardSpec
from rlrouter.rewards.router_r1 import (RouterR1Reward, call_outcomes, format_scores, outcome_score,
                                       score_trajectories)


def policy_summary(trajs: Sequence[Any], candidates: Sequence[str]) -> dict[str, Any]:
    fmt = format_scores(trajs, candidates)
    em = [outcome_score(t.answer, list(t.item["ground_truth"]), "em", call_outcomes(t)) for t in trajs]
    by_task: dict[str, list[Any]] = {}
    for t in trajs:
        by_task.setdefault(task_of(t.item), []).append(t)
    return {"n": len(trajs), "accuracy": float(np.mean(em)) if em else 0.0,
            "format_valid": float(np.mean([f == 0 for f in fmt])) if fmt else 0.0,
            "cost_per_query": float(np.mean([t.cost for t in trajs])) if trajs else 0.0,
            "calls_per_query": sum(len(t.routes) for t in trajs) / max(1, len(trajs)),
            "route_share": trajectory_share(trajs, candidates),
            "route_share_by_task": {task: trajectory_share(ts, candidates) for task, ts in by_task.items()}}


def held_out_summary(trajs: Sequence[Any], candidates: Sequence[str], spec: RewardSpec,
                     reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """``policy_summary`` plus the mean Router-R1 reward. With ``reference`` (``cost_bounds`` and ``strong``,
    ``rlrouter.eval.route_scores``) costs are scaled on the reference window, the scale every route is
    scored on, and the strong-call share is given per task; without it, a fresh cost window over these
    trajectories (every evaluation of a run scales costs the same way)."""
    reward = RouterR1Reward(spec.alpha, candidates=list(candidates), cost_window=spec.cost_window, metric=spec.metric)
    scores = score_trajectories(reward, trajs)
    failures = Counter(s.failure for s in scores if s.failure)
    out = {**policy_summary(trajs, candidates),
           "mean_reward": float(np.mean([s.total for s in scores])) if scores else 0.0,
           "format_reward_mean": float(np.mean([s.format for s in scores])) if scores else 0.0,
           "format_failures": dict(failures.most_common(5))}
    if reference and trajs:
        bounds = tuple(reference["cost_bounds"])
        s = summarize(policy_rows(trajs, candidates, reference["strong"], spec.alpha, bounds, spec.metric),
                      [task_of(t.item) for t in trajs])
        out.update({k: s[k] for k in ("mean_reward", "strong_share", "strong_share_by_task", "mean_reward_by_task")})
        out["cost_bounds"] = list(bounds)
    return out


def held_out_records(trajs: Sequence[Any], candidates: Sequence[str], spec: RewardSpec,
                     reference: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per held-out trajectory, for reading failures back: the question, the policy's text, its
    answer and whether it matched, the models it called, its Router-R1 reward and, when the format check
    failed, why. The reward is on the scale of ``held_out_summary`` with the same arguments: the
    reference's cost bounds, else a cost window over these trajectories."""
    reward = RouterR1Reward(spec.alpha, candidates=list(candidates), cost_window=spec.cost_window, metric=spec.metric)
    scores = score_trajectories(reward, trajs)
    totals = [s.total for s in scores]
    if reference and trajs:
        totals = policy_rows(trajs, candidates, reference["strong"], spec.alpha, tuple(reference["cost_bounds"]),
                             spec.metric).reward.tolist()
    return [{"id": t.item.get("id"), "task": task_of(t.item), "query": t.item["query"],
             "ground_truth": list(t.item["ground_truth"]), "text": t.text, "answer": t.answer,
             "exact_match": outcome_score(t.answer, list(t.item["ground_truth"]), "em", call_outcomes(t)),
             "routes": [r.model for r in t.routes], "reward": total, "format_failure": s.failure}
            for t, s, total in zip(trajs, scores, totals)]


def plot_held_out(metrics: list[dict[str, Any]], out_dir: str | Path, baselines: dict[str, dict[str, Any]] | None = None,
                  name: str = "held_out_curve.png", scored_on: str = "held-out") -> str | None:
    """The evaluation curve of a run (``eval/...`` rows; step 0 is the cold-start level) on ``scored_on``'s
    questions (``held-out``, or ``dev`` when the curve scores training questions kept out of training): greedy
    format validity and accuracy; mean reward against the per-task rule and the three best fixed routes (same
    questions and reward); and per task the share of calls to the candidate the policy called most there
    (``eval/share/<task>/<candidate>``), or, for a run that logs none, the strong-call share per task. None
    when the run evaluated nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = [m for m in metrics if "eval/format_valid" in m]
    if not rows:
        return None
    steps = [m["step"] for m in rows]
    fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
    ax[0].plot(steps, [m["eval/format_valid"] for m in rows], marker="o", label="format valid")
    ax[0].plot(steps, [m["eval/accuracy"] for m in rows], marker="s", label="accuracy (EM)")
    ax[0].set_ylim(-0.05, 1.05)
    ax[1].plot(steps, [m["eval/mean_reward"] for m in rows], marker="o", color="C2", label="policy")
    shown = reference_lines(baselines or {})
    for k, (bname, b) in enumerate(shown.items()):
        style = {"ls": ("-.", ":", "--", (0, (1, 3)))[k % 4], "lw": 1.3, "color": ("C3", "C0", "C4", "C7")[k % 4]}
        if "accuracy" in b:
            ax[0].axhline(b["accuracy"], **style, label=f"{bname} accuracy")
        if "mean_reward" in b:
            ax[1].axhline(b["mean_reward"], **style, label=bname)
    shares = {}  # task -> (its most-called candidate over the curve, that candidate's summed share)
    for key in {k for m in rows for k in m if k.startswith("eval/share/")}:
        _, _, task, cand = key.split("/", 3)
        total = sum(m.get(key, 0.0) for m in rows)
        if total > shares.get(task, (None, -1.0))[1]:
            shares[task] = (cand, total)
    if shares:
        for k, (task, (cand, _)) in enumerate(sorted(shares.items())):
            ax[2].plot(steps, [m.get(f"eval/share/{task}/{cand}", 0.0) for m in rows], marker="os^v"[k % 4],
                       label=f"{task} -> {cand}")
        third = "share of each task's most-called candidate"
    else:
        tasks = sorted({k.split("/", 2)[2] for m in rows for k in m if k.startswith("eval/strong_share/")})
        for k, task in enumerate(tasks):
            ax[2].plot(steps, [m.get(f"eval/strong_share/{task}", np.nan) for m in rows], marker="os^v"[k % 4],
                       label=task)
        third = "strong-call share per task"
    ax[2].set_ylim(-0.05, 1.05)
    titles = (f"{scored_on} format and accuracy", f"{scored_on} mean reward", third)
    for a, title in zip(ax, titles):
        a.set_xlabel("RL step (0 = after the cold start)"), a.set_title(title)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    p = Path(out_dir) / name
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)


def reference_lines(baselines: dict[str, dict[str, Any]], fixed: int = 3) -> dict[str, dict[str, Any]]:
    """The reference lines a curve is drawn against: the per-task rule, then the ``fixed`` best fixed routes
    (``always_*``) by mean reward; with many candidates, every fixed route would bury the curve."""
    rule = {k: v for k, v in baselines.items() if k == "per_task_rule"}
    always = sorted(((k, v) for k, v in baselines.items() if k.startswith("always_") and "mean_reward" in v),
                    key=lambda kv: -kv[1]["mean_reward"])
    return {**rule, **dict(always[:fixed])}


def label_groups(points: dict[str, tuple[float, float]], tol: float = 0.03) -> list[tuple[tuple[float, float], list[str]]]:
    """Points that (nearly) coincide, grouped: one label per group, so names never print over each other.

    Two points coincide when they are within ``tol`` of the axis span in both x and y (in
    accuracy_vs_cost.png always_cheapest and random sat on one spot and their labels overprinted)."""
    xs = [p[0] for p in points.values()]
    ys = [p[1] for p in points.values()]
    sx = (max(xs) - min(xs) if xs else 0.0) or 1.0
    sy = (max(ys) - min(ys) if ys else 0.0) or 1.0
    groups: list[tuple[tuple[float, float], list[str]]] = []
    for name, (x, y) in points.items():
        for (gx, gy), names in groups:
            if abs(x - gx) <= tol * sx and abs(y - gy) <= tol * sy:
                names.append(name)
                break
        else:
            groups.append(((x, y), [name]))
    return groups


def reward_figure(metrics: list[dict[str, Any]]) -> Any:
    """reward/total on its own panel (drawn with its parts it hid under reward/format when they
    were equal), the reward's parts, and the rollout rates; whole-number step ticks."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [m["step"] for m in metrics]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].plot(steps, [m.get("reward/total", np.nan) for m in metrics], marker="o", color="k", label="reward/total")
    ax[0].set_title("reward/total")
    parts = [k for k in ("reward/format", "reward/outcome", "reward/cost") if any(k in m for m in metrics)]
    for key, mk, ls in zip(parts, "sD^", ("-", "--", ":")):
        ax[1].plot(steps, [m.get(key, np.nan) for m in metrics], marker=mk, ls=ls, alpha=0.85, label=key)
    ax[1].set_title("reward parts"), ax[1].legend(fontsize=8)
    ax[2].plot(steps, [m.get("rollout/format_valid", np.nan) for m in metrics], marker="o", label="format valid")
    ax[2].plot(steps, [m.get("rollout/em", np.nan) for m in metrics], marker="s", ls="--", label="EM")
    ax[2].set_ylim(-0.05, 1.05), ax[2].set_title("rollout"), ax[2].legend(fontsize=8)
    for a in ax:
        a.set_xlabel("step")
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_run(metrics: list[dict[str, Any]], results: dict[str, dict[str, Any]], out_dir: str | Path) -> list[str]:
    """reward_curve.png, route_shares.png, accuracy_vs_cost.png under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths = []
    if metrics:
        fig = reward_figure(metrics)
        p = out / "reward_curve.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(str(p))
    names = list(results)
    cands = sorted({c for r in results.values() for c in r.get("route_share", {})})
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 3.6))
    bottom = np.zeros(len(names))
    for c in cands:
        vals = np.array([(results[n].get("route_share") or {}).get(c, 0.0) for n in names])
        ax.bar(names, vals, bottom=bottom, label=c)
        bottom += vals
    ax.set_ylabel("share of calls"), ax.set_title("route shares"), ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    p = out / "route_shares.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    points = {n: (results[n]["cost_per_query"], results[n]["accuracy"]) for n in names}
    for n, mk in zip(names, "osD^v<>ph*" * 3):
        ax.scatter(*points[n], s=60, marker=mk, alpha=0.8)
    for (x, y), group in label_groups(points):
        ax.annotate("\n".join(group), (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points", va="bottom")
    ax.margins(x=0.25, y=0.15)
    ax.set_xlabel("mean cost per query (USD)"), ax.set_ylabel("accuracy (EM)"), ax.set_title("accuracy vs cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    p = out / "accuracy_vs_cost.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
    return paths


ROW_LABELS = {"policy_untrained": "policy, untrained", "policy_cold_start": "policy after the cold start (RL step 0)",
              "policy_trained": "policy, trained", "always_cheapest": "always cheapest", "always_strongest":
              "always strongest", "random": "random", "per_task_rule": "best fixed route per task",
              "cascade": "cascade (cheapest; strongest too when its reply states no answer)",
              "oracle": "oracle (cheapest correct)"}


def call_share_table(by_task: dict[str, dict[str, float]], overall: dict[str, float]) -> list[str]:
    """The trained policy's share of calls to each candidate, per task and in all, as markdown lines (none
    without shares); candidates no task calls are left out."""
    called = [c for c in overall if overall[c] > 0 or any(s.get(c, 0) > 0 for s in by_task.values())]
    if not by_task or not called:
        return []
    lines = ["", "The trained policy's calls, share per candidate:", "",
             "| task | " + " | ".join(called) + " |", "|---|" + "---|" * len(called)]
    for task, shares in [*by_task.items(), ("all", overall)]:
        lines.append(f"| {task} | " + " | ".join(f"{shares.get(c, 0.0):.2f}" for c in called) + " |")
    return lines


def results_table(report: dict[str, Any]) -> str:
    """The run's held-out table in Markdown: every row on the same questions, reward and cost scale, with the
    strong-call share per task, then the policy against the best fixed route and where its reward goes."""
    results = dict(report.get("results", {}))
    curve = report.get("held_out_curve") or []
    if curve and curve[0].get("step") == 0:  # the cold-start level, from the held-out curve
        c = curve[0]
        results["policy_cold_start"] = {
            "format_valid": c.get("eval/format_valid"), "accuracy": c.get("eval/accuracy"),
            "mean_reward": c.get("eval/mean_reward"), "cost_per_query": c.get("eval/cost_per_query"),
            "strong_share_by_task": {k.split("/", 2)[2]: v for k, v in c.items() if k.startswith("eval/strong_share/")}}
    tasks = sorted({t for r in results.values() for t in (r.get("strong_share_by_task") or {})})
    head = ["route", "format valid", "accuracy", "mean reward", "cost / query"] + [f"strong share {t}" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = [k for k in ROW_LABELS if k in results] + [k for k in results if k not in ROW_LABELS]

    def num(v: Any, fmt: str) -> str:
        return "–" if v is None else format(v, fmt)

    for k in order:
        r = results[k]
        shares = r.get("strong_share_by_task") or {}
        cells = [ROW_LABELS.get(k, k), num(r.get("format_valid"), ".3f"), num(r.get("accuracy"), ".3f"),
                 num(r.get("mean_reward"), ".3f"), num(r.get("cost_per_query"), ".5f")]
        lines.append("| " + " | ".join(cells + [num(shares.get(t), ".2f") for t in tasks]) + " |")
    routing = report.get("routing") or {}
    if "policy_minus_best_fixed" in routing:
        d, loss = routing["policy_minus_best_fixed"], routing["policy_loss"]
        lines += ["", f"alpha {routing['alpha']:g}; best fixed route: {routing['best_fixed']}; per-task rule: "
                  + ", ".join(f"{t} -> {c}" for t, c in routing["per_task"].items())
                  + f" (both chosen on the training questions). Policy minus best fixed route: {d['value']:+.3f} "
                  f"[{d['lo']:+.3f}, {d['hi']:+.3f}] (paired bootstrap, 95%, {routing['routes']['policy']['n']} "
                  f"questions). The gap, {loss['gap']:+.3f}, is route {loss['route']:+.3f}, format "
                  f"{loss['format']:+.3f}, copying the reply {loss['copy']:+.3f}."]
        lines += call_share_table(routing["routes"]["policy"].get("route_share_by_task") or {},
                                  routing["routes"]["policy"].get("route_share") or {})
        samp = routing.get("policy_sampled")
        if samp:
            b, t = samp["minus_best_fixed"], samp["minus_per_task_rule"]
            lines += ["", f"Sampled as in training ({samp['samples']} routes a question): mean reward "
                      f"{samp['mean_reward']:.3f}, format valid {samp['format_valid']:.3f}; minus best fixed route "
                      f"{b['value']:+.3f} [{b['lo']:+.3f}, {b['hi']:+.3f}], minus per-task rule {t['value']:+.3f} "
                      f"[{t['lo']:+.3f}, {t['hi']:+.3f}]."]
            lines += call_share_table(samp.get("route_share_by_task") or {}, samp.get("route_share") or {})
        esc = routing.get("policy_escalation")
        if esc:
            lines += ["", "After a first call to the cheapest candidate, the policy called the strongest too on "
                      f"{esc['not_stated']['escalated']} of {esc['not_stated']['n']} questions whose cheap reply "
                      f"states no final answer and on {esc['stated']['escalated']} of {esc['stated']['n']} whose reply "
                      "states one (the cascade escalates on all of the first and none of the second)."]
        sig = routing.get("policy_signal")
        if sig and sig["escalated"]["n"] and sig["kept"]["n"]:
            d = sig["cheap_right_kept_minus_escalated"]
            lines += ["", f"Of those stated replies, the cheapest candidate was right on "
                      f"{sig['escalated']['cheap_right']:.3f} of the {sig['escalated']['n']} it escalated on and "
                      f"{sig['kept']['cheap_right']:.3f} of the {sig['kept']['n']} it kept: {d['value']:+.3f} "
                      f"[{d['lo']:+.3f}, {d['hi']:+.3f}] (above 0: it asks where the cheap reply is more often wrong)."]
    return "\n".join(lines) + "\n"


def write_train_report(out_dir: str | Path, report: dict[str, Any]) -> Path:
    p = Path(out_dir) / "report.json"
    p.write_text(json.dumps(report, indent=2, default=str))
    (Path(out_dir) / "report.md").write_text(results_table(report))
    return p


def routing_summary(report: dict[str, Any]) -> dict[str, Any]:
    """A trained run's held-out routing figures in the shape the many-model comparison keeps
    (``benchmarks/results/many_models.json``'s ``router_r1``): the greedy policy and, where the run read it,
    the sampled one, each against the best fixed route and the per-task rule (paired intervals, ``mean``,
    ``lo``, ``hi``), their per-task call shares, the questions and the training episodes (RL steps x prompts x
    samples; the extra prompt batches of ``train.filter_groups`` are not counted)."""
    routing = report.get("routing") or {}
    if "policy_minus_best_fixed" not in routing:
        raise ValueError("routing_summary: the report has no held-out routing board (report['routing']); "
                         "was it a pilot (eval.num_questions=0)?")

    def iv(d: dict[str, Any]) -> dict[str, float]:
        return {"mean": d["value"], "lo": d["lo"], "hi": d["hi"]}

    cfg = report.get("config") or {}
    steps = [m for m in report.get("steps") or [] if "reward/total" in m]
    train = cfg.get("train") or {}
    per_step = int(train.get("prompts_per_step", 0)) * int(train.get("n_samples", 0))
    policy = routing["routes"]["policy"]
    out: dict[str, Any] = {
        "alpha": routing["alpha"], "questions": policy["n"], "tasks": routing.get("tasks"),
        "best_fixed": routing["best_fixed"], "per_task": routing["per_task"],
        "episodes": len(steps) * per_step, "rl_steps": len(steps),
        "algo": cfg.get("learner", {}).get("algo"), "mean_reward": policy["mean_reward"],
        "policy_minus_best_fixed": iv(routing["policy_minus_best_fixed"]),
        "policy_minus_per_task": iv(routing["policy_minus_per_task_rule"]),
        "route_share_by_task": policy.get("route_share_by_task"),
        "reference_rewards": {k: routing["routes"][k]["mean_reward"] for k in (routing["best_fixed"], "per_task_rule")
                              if k in routing["routes"]}}
    samp = routing.get("policy_sampled")
    if samp:
        out["sampled"] = {"samples": samp["samples"], "mean_reward": samp["mean_reward"],
                          "policy_minus_best_fixed": iv(samp["minus_best_fixed"]),
                          "policy_minus_per_task": iv(samp["minus_per_task_rule"]),
                          "route_share_by_task": samp.get("route_share_by_task")}
    return out
