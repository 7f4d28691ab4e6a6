"""The curves of routing over N candidates by willingness to pay (``rlrouter.routers.wtp``), their AIQ and paired
intervals.

A router over a pool predicts, per prompt and candidate, a quality ``q_hat`` (N, M) and a cost ``c_hat``
(N, M). At a willingness to pay ``w`` (USD a user pays for one unit of quality) it sends each prompt to
``argmax_m(w * q_hat - c_hat)`` (RouterBench, Hu et al. 2024, Sec. 3: the router's objective with the
quality-cost trade-off as a parameter); sweeping ``w`` from 0 (the cheapest predicted candidate) to
large (the best predicted one) traces the router's cost-quality curve. A price weight ``lam`` per
thousandth of a dollar (score = quality - lam * 1000 * cost) is the same trade-off at ``w = 1 / (1000 lam)``.

A *setting* is one point of a sweep: per test prompt, the quality of the answer it returned and what it
paid (a cascade pays for every call it made). :class:`Sweep` holds S settings as (S, N) arrays, so
every metric, and every bootstrap resample, is a mean over prompts.

AIQ (RouterBench Sec. 3.2, ``metrics.aiq``) is computed per task over one cost range for every router:
by default RouterBench's, from 0 to the dearest single model's mean cost (``cost_ranges``). The zero router
(the hull of the fixed routes) shares it, so AIQ(router) - AIQ(zero router) says what routing adds over
mixing fixed models. The overall figure is the mean over tasks.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from rlrouter.eval.metrics import aiq
from rlrouter.routers.wtp import (USD_PER_THOUSANDTH, Sweep, fixed_sweep,  # noqa: F401 - the sweep eval reads
                                   nondecreasing_convex_hull, route_by_wtp, wtp_grid)


def task_rows(tasks: Sequence[str]) -> dict[str, np.ndarray]:
    """Row indices per task, sorted by task name."""
    t = np.asarray(tasks)
    return {k: np.nonzero(t == k)[0] for k in sorted(set(tasks))}


AIQ_RANGES = ("routerbench", "models")


def cost_ranges(scores: np.ndarray, costs: np.ndarray, tasks: Sequence[str],
                convention: str = "routerbench") -> dict[str, tuple[float, float]]:
    """Per task, the cost range AIQ is taken over. ``routerbench``: from 0 to the dearest single model's mean
    cost, as RouterBench's ``calc_AIQ`` divides the area by the largest cost (a router's hull counts 0 left of
    its cheapest point); ``models``: from the cheapest to the dearest single model."""
    if convention not in AIQ_RANGES:
        raise ValueError(f"eval.aiq_range: expected one of {AIQ_RANGES}, got '{convention}'")
    out = {}
    for t, rows in task_rows(tasks).items():
        c = np.asarray(costs)[rows].mean(axis=0)
        out[t] = (0.0 if convention == "routerbench" else float(c.min()), float(c.max()))
    return out


def sweep_aiq(sweep: Sweep, rows: np.ndarray, cost_range: tuple[float, float],
              weights: np.ndarray | None = None) -> float:
    c, q = sweep.points(rows, weights)
    return aiq(c, q, *cost_range)


def aiq_by_task(sweep: Sweep, tasks: Sequence[str], ranges: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """AIQ per task over its range, and ``overall``: the mean over tasks."""
    out = {t: sweep_aiq(sweep, rows, ranges[t]) for t, rows in task_rows(tasks).items()}
    out["overall"] = float(np.mean(list(out.values())))
    return out


def aiq_minus_reference(sweeps: Mapping[str, Sweep], reference: str, tasks: Sequence[str],
                        ranges: Mapping[str, tuple[float, float]], n_boot: int = 1000, level: float = 0.95,
                        seed: int = 0) -> dict[str, dict[str, dict[str, float]]]:
    """Paired bootstrap of AIQ(router) - AIQ(reference) per task and overall (the mean over tasks).

    Each resample draws every task's test prompts with replacement (stratified by task, so each task keeps
    its size), once for all routers: the pairing. The cost range stays the one of the full test set, so a
    resample moves the points, not the axis. Returns ``{router: {task | "overall": {mean, lo, hi}}}`` where
    ``mean`` is the difference on the test set itself."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap.level: must be in (0, 1), got {level}")
    if reference not in sweeps:
        raise ValueError(f"bootstrap reference '{reference}' is not an evaluated router ({sorted(sweeps)})")
    by_task = task_rows(tasks)
    rng = np.random.default_rng(seed)
    # (B, n_t) how often each of a task's rows is drawn in each resample, shared by every router
    counts = {t: np.stack([np.bincount(rng.integers(0, len(rows), size=len(rows)), minlength=len(rows))
                           for _ in range(n_boot)]).astype(np.float64) for t, rows in by_task.items()}
    point = {k: aiq_by_task(s, tasks, ranges) for k, s in sweeps.items()}
    boot: dict[str, dict[str, np.ndarray]] = {}
    for name, s in sweeps.items():
        draws = {t: np.empty(n_boot) for t in by_task}
        for t, rows in by_task.items():
            cost, quality = s.cost[:, rows], s.quality[:, rows]  # (S, n_t)
            n_t = len(rows)
            cs, qs = counts[t] @ cost.T / n_t, counts[t] @ quality.T / n_t  # (B, S)
            for b in range(n_boot):
                draws[t][b] = aiq(cs[b], qs[b], *ranges[t])
        draws["overall"] = np.mean([draws[t] for t in by_task], axis=0)
        boot[name] = draws
    a = (1.0 - level) / 2.0
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in sweeps:
        entry = {}
        for t in [*by_task, "overall"]:
            d = boot[name][t] - boot[reference][t]
            entry[t] = {"mean": float(point[name][t] - point[reference][t]),
                        "lo": float(np.quantile(d, a)), "hi": float(np.quantile(d, 1.0 - a))}
        out[name] = entry
    return out


def reward_at(sweep: Sweep, lam: float) -> np.ndarray:
    """(S,) mean of quality - lam * 1000 * cost per setting: the score a price weight ``lam`` puts on each."""
    return (sweep.quality - lam * USD_PER_THOUSANDTH * sweep.cost).mean(axis=1)


def hull_points(sweep: Sweep, rows: np.ndarray) -> dict[str, list[float]]:
    """The non-decreasing convex hull of a sweep's points on ``rows`` (for the plots and the report)."""
    c, q = sweep.points(rows)
    hc, hq = nondecreasing_convex_hull(c, q)
    return {"cost": hc.tolist(), "quality": hq.tolist()}
