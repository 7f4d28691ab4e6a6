"""Routing over N candidates by willingness to pay, and its curves, AIQ and paired intervals.

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

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from rlrouter.eval.metrics import aiq, nondecreasing_convex_hull

USD_PER_THOUSANDTH = 1000.0  # a price weight is per thousandth of a dollar


def wtp_grid(mean_costs: np.ndarray, num: int = 60, lams: Sequence[float] = ()) -> np.ndarray:
    """Willingness-to-pay values to sweep: 0, then ``num`` geometric steps from a hundredth of the cheapest
    candidate's mean cost to a hundred times the dearest's (past both ends the decisions stop changing), plus
    ``w = 1 / (1000 lam)`` for each reported price weight ``lam``. Sorted, unique."""
    c = np.asarray(mean_costs, dtype=np.float64)
    c = c[c > 0]
    if num < 1:
        raise ValueError(f"wtp.num: must be >= 1, got {num}")
    lo, hi = (c.min() / 100.0, c.max() * 100.0) if c.size else (1e-6, 1.0)
    extra = [1.0 / (USD_PER_THOUSANDTH * lam) for lam in lams if lam > 0]
    return np.unique(np.concatenate([[0.0], np.geomspace(lo, hi, num), extra]))


def route_by_wtp(q_hat: np.ndarray, c_hat: np.ndarray, w: float) -> np.ndarray:
    """(N,) ``argmax_m(w * q_hat - c_hat)``; ties go to the cheaper predicted candidate."""
    q_hat = np.asarray(q_hat, dtype=np.float64)
    c_hat = np.asarray(c_hat, dtype=np.float64)
    if q_hat.shape != c_hat.shape or q_hat.ndim != 2:
        raise ValueError(f"q_hat, c_hat: need two (N, M) arrays of one shape, got {q_hat.shape} and {c_hat.shape}")
    value = w * q_hat - c_hat  # (N, M)
    best = value.max(axis=1, keepdims=True)
    tied = np.isclose(value, best, rtol=0.0, atol=1e-12)
    return np.where(tied, c_hat, np.inf).argmin(axis=1)


@dataclass
class Sweep:
    """A router's settings on the test prompts: ``quality`` and ``cost`` (S, N), ``decisions`` (S, N) the
    candidate that answered, ``labels`` (S,) what each setting is (its w, threshold or model)."""

    quality: np.ndarray
    cost: np.ndarray
    decisions: np.ndarray
    labels: list[str]
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.quality = np.atleast_2d(np.asarray(self.quality, dtype=np.float64))
        self.cost = np.atleast_2d(np.asarray(self.cost, dtype=np.float64))
        self.decisions = np.atleast_2d(np.asarray(self.decisions, dtype=np.int64))
        if not (self.quality.shape == self.cost.shape == self.decisions.shape):
            raise ValueError(f"sweep: quality {self.quality.shape}, cost {self.cost.shape} and decisions "
                             f"{self.decisions.shape} must share one (S, N) shape")
        if len(self.labels) != self.quality.shape[0]:
            raise ValueError(f"sweep.labels: {len(self.labels)} for {self.quality.shape[0]} settings")

    @staticmethod
    def from_decisions(decisions: np.ndarray, scores: np.ndarray, costs: np.ndarray, labels: Sequence[str],
                       paid: np.ndarray | None = None) -> "Sweep":
        """Settings that answer with ``decisions`` (S, N) against logged ``scores`` / ``costs`` (N, M);
        ``paid`` (S, N) overrides the cost where a setting paid for more calls than its answer."""
        d = np.atleast_2d(np.asarray(decisions, dtype=np.int64))
        rows = np.arange(d.shape[1])
        q = np.asarray(scores)[rows, d]
        c = np.asarray(costs)[rows, d] if paid is None else np.atleast_2d(paid)
        return Sweep(quality=q, cost=c, decisions=d, labels=list(labels))

    def subset(self, settings: Sequence[int] | np.ndarray) -> "Sweep":
        s = np.asarray(settings, dtype=np.int64)
        return Sweep(self.quality[s], self.cost[s], self.decisions[s], [self.labels[i] for i in s], dict(self.info))

    def points(self, rows: np.ndarray | None = None, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(mean cost (S,), mean quality (S,)) over ``rows`` (all when None), each row counted ``weights``
        times when given (a bootstrap resample: one count per row of ``rows``)."""
        c, q = (self.cost, self.quality) if rows is None else (self.cost[:, rows], self.quality[:, rows])
        if weights is None:
            return c.mean(axis=1), q.mean(axis=1)
        total = weights.sum()
        return c @ weights / total, q @ weights / total


def fixed_sweep(scores: np.ndarray, costs: np.ndarray, names: Sequence[str]) -> Sweep:
    """The zero router's settings: every candidate on every prompt, one setting a candidate."""
    m = np.asarray(scores).shape[1]
    n = np.asarray(scores).shape[0]
    return Sweep.from_decisions(np.repeat(np.arange(m)[:, None], n, axis=1), scores, costs, list(names))


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
