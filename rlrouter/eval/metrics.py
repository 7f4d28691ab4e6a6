"""Router metrics on logged outcomes: quality, cost, call shares, APGR, CPT(x%), AIQ, threshold sweeps.

Definitions follow the papers that introduced them:

* **PGR / APGR** (RouteLLM, Ong et al. 2024, Sec. 4 and ``routellm/evals/evaluate.py``):
  ``PGR = (q(router) - q(weak)) / (q(strong) - q(weak))``; APGR is the area under the quality curve
  over the share of calls to the strong candidate (trapezoids over the swept points), with the same
  area for always-weak and always-strong taken over the same points, i.e.
  ``(AUC - AUC_weak) / (AUC_strong - AUC_weak)``. With points spanning 0..100% this is the mean PGR.
* **CPT(x%)** (RouteLLM, Sec. 4): the share of strong calls needed to recover x% of the gap, read off
  the piecewise-linear curve. RouteLLM uses ``np.interp`` (valid only for an increasing curve); here it
  is the *first* crossing of the target, which is the same number on an increasing curve and still
  defined on a noisy one. ``nan`` when the curve never reaches the target.
* **AIQ** (RouterBench, Hu et al. 2024, Sec. 3.2): ``1/(c_max - c_min) * integral of R~(c) dc`` where
  R~ is the non-decreasing convex hull of the router's (cost, quality) points: points on a chord are
  reachable by randomising between two settings, and paying more never has to lose quality. Below the
  router's cheapest point no setting exists, so R~ counts 0 there (as RouterBench's code does by
  normalising over [0, c_max]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlrouter.routers.wtp import hull_value, nondecreasing_convex_hull  # noqa: F401 - AIQ's hull

# numpy 2 renamed trapz; keep both spellings working
_trapezoid = getattr(np, "trapezoid", None) or np.trapz


@dataclass(frozen=True)
class OperatingPoint:
    """What one set of decisions achieves: mean quality, cost and the share of calls per candidate."""

    quality: float
    cost_total: float
    cost_mean: float
    shares: tuple[float, ...]  # (M,) fraction of prompts sent to each candidate
    n: int

    def share(self, index: int) -> float:
        return self.shares[index]


def call_shares(decisions: np.ndarray, num_candidates: int) -> np.ndarray:
    """(M,) fraction of prompts routed to each candidate."""
    decisions = np.asarray(decisions, dtype=np.int64)
    if decisions.size and (decisions.min() < 0 or decisions.max() >= num_candidates):
        raise ValueError(f"decisions: indices must lie in [0, {num_candidates}), got "
                         f"[{decisions.min()}, {decisions.max()}]")
    return np.bincount(decisions, minlength=num_candidates) / max(1, decisions.size)


def evaluate_decisions(scores: np.ndarray, costs: np.ndarray, decisions: np.ndarray) -> OperatingPoint:
    """Replay ``decisions`` (N,) against logged ``scores`` and ``costs`` (N, M)."""
    scores = np.asarray(scores, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    decisions = np.asarray(decisions, dtype=np.int64)
    if decisions.shape != (scores.shape[0],):
        raise ValueError(f"decisions: expected shape ({scores.shape[0]},), got {decisions.shape}")
    shares = call_shares(decisions, scores.shape[1])
    rows = np.arange(len(decisions))
    q = scores[rows, decisions]
    c = costs[rows, decisions]
    return OperatingPoint(quality=float(q.mean()), cost_total=float(c.sum()), cost_mean=float(c.mean()),
                          shares=tuple(float(s) for s in shares), n=int(len(decisions)))


def calls_cost(costs: np.ndarray, calls: list[list[int]]) -> np.ndarray:
    """(N,) the logged cost of every call each prompt paid for, ``calls[i]`` the candidate indices called for
    prompt i in order (a cascade pays its cheap call before escalating; a candidate called twice is paid
    twice). ``costs``: (N, M) logged costs."""
    costs = np.asarray(costs, dtype=np.float64)
    if len(calls) != costs.shape[0]:
        raise ValueError(f"calls: expected one list per prompt ({costs.shape[0]}), got {len(calls)}")
    m = costs.shape[1]
    for i, row in enumerate(calls):
        bad = [c for c in row if not 0 <= int(c) < m]
        if bad:
            raise ValueError(f"calls[{i}]: candidate indices {bad} outside 0..{m - 1}")
    return np.array([float(sum(costs[i, int(c)] for c in row)) for i, row in enumerate(calls)])


def weak_split(scores: np.ndarray, decisions: np.ndarray, weak: int, strong: int) -> dict[str, dict[str, float]]:
    """The weak candidate's logged quality on the prompts a router kept on it (``kept``) and on those it sent to
    the strong one (``sent``), with their counts: a router that reads the prompt sends those the weak one gets
    wrong, so ``kept`` - ``sent`` > 0; a random router's difference is 0 in expectation. Prompts routed to
    any other candidate are in neither. A side with no prompts has quality None (JSON null)."""
    scores = np.asarray(scores, dtype=np.float64)
    decisions = np.asarray(decisions, dtype=np.int64)
    if decisions.shape != (scores.shape[0],):
        raise ValueError(f"decisions: expected shape ({scores.shape[0]},), got {decisions.shape}")
    out = {}
    for side, index in (("kept", weak), ("sent", strong)):
        rows = decisions == index
        n = int(rows.sum())
        out[side] = {"n": n, "weak_quality": float(scores[rows, weak].mean()) if n else None}
    return out


def pooled_weak_split(splits: list[dict[str, dict[str, float]]], z: float = 1.96) -> dict[str, float]:
    """``weak_split``s of disjoint prompt sets pooled: kept - sent over all their prompts, with a normal
    approximation interval (two independent proportions; None when a side has no prompts)."""
    n = {s: sum(x[s]["n"] for x in splits) for s in ("kept", "sent")}
    if not n["kept"] or not n["sent"]:
        return {"n_kept": n["kept"], "n_sent": n["sent"], "value": None, "lo": None, "hi": None}
    q = {s: sum(x[s]["n"] * x[s]["weak_quality"] for x in splits if x[s]["n"]) / n[s] for s in n}
    se = float(np.sqrt(sum(q[s] * (1 - q[s]) / n[s] for s in n)))
    d = q["kept"] - q["sent"]
    return {"n_kept": n["kept"], "n_sent": n["sent"], "kept": q["kept"], "sent": q["sent"], "value": d,
            "lo": d - z * se, "hi": d + z * se}


def pgr(quality: float, weak_quality: float, strong_quality: float) -> float:
    """Performance gap recovered: 0 at the weak candidate's quality, 1 at the strong one's."""
    gap = strong_quality - weak_quality
    if gap == 0:
        return float("nan")
    return (quality - weak_quality) / gap


@dataclass(frozen=True)
class Curve:
    """A cost-quality curve from sweeping a threshold router. Arrays share one length, sorted by strong share."""

    thresholds: np.ndarray
    strong_share: np.ndarray  # fraction of calls to the strong candidate, in [0, 1]
    quality: np.ndarray
    cost_mean: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.strong_share)
        for name in ("thresholds", "quality", "cost_mean"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"curve.{name}: length {len(getattr(self, name))} != {n}")
        if n == 0:
            raise ValueError("curve: no points")

    def to_dict(self) -> dict[str, list[float]]:
        return {"threshold": [float(x) for x in self.thresholds],
                "strong_share": [float(x) for x in self.strong_share],
                "quality": [float(x) for x in self.quality], "cost_mean": [float(x) for x in self.cost_mean]}


def threshold_sweep(strong_scores: np.ndarray, scores: np.ndarray, costs: np.ndarray, weak: int, strong: int,
                    num_thresholds: int = 10) -> Curve:
    """Sweep the threshold of a router that sends a prompt to ``strong`` when its score >= threshold.

    Thresholds are the quantiles of the router's own scores at 0, 1/n, ..., 1 (RouteLLM's
    ``pd.qcut(..., n)`` bins); the last one uses ">" so the sweep ends at 0% strong calls. Scores
    with ties give repeated points; they are kept once.
    """
    s = np.asarray(strong_scores, dtype=np.float64)
    if s.shape != (scores.shape[0],):
        raise ValueError(f"strong_scores: expected shape ({scores.shape[0]},), got {s.shape}")
    if num_thresholds < 1:
        raise ValueError("num_thresholds: must be >= 1")
    thresholds = np.quantile(s, np.linspace(0.0, 1.0, num_thresholds + 1))
    rows = np.arange(len(s))
    seen: dict[float, tuple[float, float, float]] = {}
    for i, t in enumerate(thresholds):
        to_strong = s > t if i == len(thresholds) - 1 else s >= t
        choice = np.where(to_strong, strong, weak)
        share = float(to_strong.mean())
        if share not in seen:
            seen[share] = (float(t), float(scores[rows, choice].mean()), float(costs[rows, choice].mean()))
    shares = np.array(sorted(seen))
    return Curve(thresholds=np.array([seen[x][0] for x in shares]), strong_share=shares,
                 quality=np.array([seen[x][1] for x in shares]), cost_mean=np.array([seen[x][2] for x in shares]))


def apgr(strong_share: np.ndarray, quality: np.ndarray, weak_quality: float, strong_quality: float) -> float:
    """RouteLLM's APGR: (AUC - AUC_weak) / (AUC_strong - AUC_weak) over the swept strong shares."""
    if strong_quality == weak_quality:
        return float("nan")  # no gap to recover
    x = np.asarray(strong_share, dtype=np.float64)
    y = np.asarray(quality, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if len(x) < 2 or x[-1] == x[0]:
        # a single operating point has no area: its PGR is the only honest summary
        return pgr(float(y.mean()), weak_quality, strong_quality)
    auc = _trapezoid(y, x)
    width = x[-1] - x[0]
    return (auc - weak_quality * width) / ((strong_quality - weak_quality) * width)


def cpt(strong_share: np.ndarray, quality: np.ndarray, weak_quality: float, strong_quality: float,
        fraction: float) -> float:
    """CPT(x): smallest strong-call share at which the curve reaches weak + x * (strong - weak).

    Linear interpolation between swept points, first crossing from the cheap end; ``nan`` if never.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: must be in [0, 1], got {fraction}")
    if strong_quality <= weak_quality:
        return float("nan")  # no gap (or a "strong" candidate that is worse): nothing to recover
    x = np.asarray(strong_share, dtype=np.float64)
    y = np.asarray(quality, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    target = weak_quality + fraction * (strong_quality - weak_quality)
    if y[0] >= target:
        return float(x[0])
    for i in range(1, len(x)):
        if y[i] >= target:
            # y[i-1] < target <= y[i]
            t = (target - y[i - 1]) / (y[i] - y[i - 1])
            return float(x[i - 1] + t * (x[i] - x[i - 1]))
    return float("nan")


def aiq(cost: np.ndarray, quality: np.ndarray, c_min: float | None = None, c_max: float | None = None) -> float:
    """RouterBench's AIQ: mean of the non-decreasing convex hull over [c_min, c_max] (exact integral)."""
    hc, hq = nondecreasing_convex_hull(cost, quality)
    lo = float(np.min(cost)) if c_min is None else float(c_min)
    hi = float(np.max(cost)) if c_max is None else float(c_max)
    if hi < lo:
        raise ValueError(f"aiq: c_max {hi} < c_min {lo}")
    if hi == lo:
        return float(hull_value(hc, hq, np.array([lo]))[0])
    # the hull is piecewise linear with kinks at its vertices (and a step at the first one), so
    # trapezoids over the vertices inside [lo, hi] plus the ends integrate it exactly
    knots = np.unique(np.concatenate([[lo, hi], hc[(hc > lo) & (hc < hi)]]))
    area = 0.0
    for a, b in zip(knots[:-1], knots[1:]):
        if b <= hc[0]:
            continue  # R~ is 0 left of the cheapest vertex
        a = max(a, hc[0])
        va, vb = hull_value(hc, hq, np.array([a, b]))
        area += 0.5 * (va + vb) * (b - a)
    return float(area / (hi - lo))


@dataclass
class RouterMetrics:
    """Every number the report shows for one router on one slice of the evaluation set."""

    name: str
    point: OperatingPoint
    pgr: float
    random_quality_at_cost: float  # expected quality of random routing at the same mean cost
    curve: Curve | None = None
    apgr: float | None = None
    cpt50: float | None = None
    cpt80: float | None = None
    aiq: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


def random_quality_at_cost(cost_mean: float, weak: tuple[float, float], strong: tuple[float, float]) -> float:
    """Expected quality of routing to strong with the probability p that matches ``cost_mean``.

    ``weak`` and ``strong`` are (quality, mean cost) of always routing there. The expectation, not one
    random draw: q = (1 - p) q_weak + p q_strong with p = (cost - c_weak) / (c_strong - c_weak),
    clipped to [0, 1].
    """
    (qw, cw), (qs, cs) = weak, strong
    if cs == cw:
        return float(max(qw, qs))
    p = float(np.clip((cost_mean - cw) / (cs - cw), 0.0, 1.0))
    return (1 - p) * qw + p * qs


def summarize(name: str, point: OperatingPoint, weak: tuple[float, float], strong: tuple[float, float],
              curve: Curve | None = None, cost_range: tuple[float, float] | None = None) -> RouterMetrics:
    """Operating-point metrics always; APGR, CPT(50/80%) and AIQ over ``curve`` when there is one.

    ``weak`` / ``strong`` are (quality, mean cost) of always-weak / always-strong on the same slice;
    AIQ is normalised over ``cost_range`` (default: their costs). The curve metrics stay None for a
    router without a curve: one point has no area, and RouterBench's hull of a single point is 0 to
    its left, which would rank a router by its price rather than its routing.
    """
    qw, qs = weak[0], strong[0]
    m = RouterMetrics(name=name, point=point, pgr=pgr(point.quality, qw, qs),
                      random_quality_at_cost=random_quality_at_cost(point.cost_mean, weak, strong), curve=curve)
    lo, hi = cost_range if cost_range is not None else (min(weak[1], strong[1]), max(weak[1], strong[1]))
    if curve is not None:
        m.apgr = apgr(curve.strong_share, curve.quality, qw, qs)
        m.cpt50 = cpt(curve.strong_share, curve.quality, qw, qs, 0.5)
        m.cpt80 = cpt(curve.strong_share, curve.quality, qw, qs, 0.8)
        m.aiq = aiq(curve.cost_mean, curve.quality, lo, hi)
    return m
