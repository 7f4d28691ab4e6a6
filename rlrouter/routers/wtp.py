"""Routing over N candidates by willingness to pay, and the settings a router's sweep yields.

A router over a pool predicts, per prompt and candidate, a quality ``q_hat`` (N, M) and a cost ``c_hat``
(N, M). At a willingness to pay ``w`` (USD a user pays for one unit of quality) it sends each prompt to
``argmax_m(w * q_hat - c_hat)`` (RouterBench, Hu et al. 2024, Sec. 3); sweeping ``w`` from 0 (the cheapest
predicted candidate) to large (the best predicted one) traces the router's cost-quality curve. A price weight
``lam`` per thousandth of a dollar is the same trade-off at ``w = 1 / (1000 lam)``. A *setting* is one point of
a sweep: per test prompt, the quality of the answer it returned and what it paid (a cascade pays for every call
it made); :class:`Sweep` holds S settings as (S, N) arrays. Their AIQ and intervals are evaluation's
(``rlrouter.eval.wtp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

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


def nondecreasing_convex_hull(cost: np.ndarray, quality: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of RouterBench's non-decreasing convex hull, sorted by cost.

    The upper convex hull (Andrew's monotone chain) up to its highest point: beyond it quality stays
    flat, because a router can always pay more and keep the best setting's quality.
    """
    c = np.asarray(cost, dtype=np.float64)
    q = np.asarray(quality, dtype=np.float64)
    if c.shape != q.shape or c.ndim != 1 or len(c) == 0:
        raise ValueError("cost, quality: need two 1-D arrays of the same non-zero length")
    # at equal cost only the best quality matters
    best: dict[float, float] = {}
    for ci, qi in zip(c.tolist(), q.tolist()):
        best[ci] = max(qi, best.get(ci, -np.inf))
    pts = sorted(best.items())
    hull: list[tuple[float, float]] = []
    for p in pts:
        # pop while the last turn is not clockwise (keeps the upper hull)
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            cross = (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1)
            if cross >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    top = int(np.argmax([y for _, y in hull]))
    hull = hull[: top + 1]
    return np.array([x for x, _ in hull]), np.array([y for _, y in hull])


def hull_value(hull_cost: np.ndarray, hull_quality: np.ndarray, at: np.ndarray) -> np.ndarray:
    """R~(c): 0 below the cheapest vertex, linear between vertices, flat after the last."""
    at = np.asarray(at, dtype=np.float64)
    v = np.interp(at, hull_cost, hull_quality)
    return np.where(at < hull_cost[0], 0.0, v)
