"""Paired bootstrap intervals for router comparisons on one test set.

Every router is scored on the same test prompts, so differences are measured *paired*: each bootstrap
resample draws prompts with replacement once and recomputes every router's numbers on that resample
(Efron & Tibshirani 1993, ch. 13; the paired percentile bootstrap RouterBench users apply to
routing curves). An interval on a difference that excludes 0 says the difference is not resampling
noise at that level.

APGR is recomputed on each resample from the router's own threshold sweep (``metrics.threshold_sweep``
with the same number of quantile thresholds), so its interval carries both the scores' and the
outcomes' sampling noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from rlrouter.eval.metrics import apgr, threshold_sweep


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile bootstrap interval."""

    value: float
    lo: float
    hi: float

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0.0 or self.hi < 0.0

    def to_dict(self) -> dict[str, float | bool]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "excludes_zero": self.excludes_zero}


def _interval(value: float, draws: np.ndarray, level: float) -> Interval:
    a = (1.0 - level) / 2.0
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return Interval(value, float("nan"), float("nan"))
    return Interval(float(value), float(np.quantile(draws, a)), float(np.quantile(draws, 1.0 - a)))


def apgr_on_rows(rows: np.ndarray, s: np.ndarray, scores: np.ndarray, costs: np.ndarray, weak: int, strong: int,
             num_thresholds: int) -> float:
    sc = scores[rows]
    curve = threshold_sweep(s[rows], sc, costs[rows], weak, strong, num_thresholds)
    return apgr(curve.strong_share, curve.quality, float(sc[:, weak].mean()), float(sc[:, strong].mean()))


def paired_bootstrap(scores: np.ndarray, costs: np.ndarray, weak: int, strong: int,
                     decisions: Mapping[str, np.ndarray], strong_scores: Mapping[str, np.ndarray],
                     references: Mapping[str, str], num_thresholds: int = 10, n_boot: int = 1000,
                     level: float = 0.95, seed: int = 0) -> dict[str, dict[str, dict[str, float | bool]]]:
    """Intervals of each router's quality and APGR minus those of each reference router.

    ``references`` maps a label (e.g. "random", "best_baseline") to a router name. Returns
    ``{router: {"quality_minus_<label>": interval, "apgr_minus_<label>": interval, "apgr": interval}}``;
    APGR entries exist only where both routers are threshold routers (have ``strong_scores``).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap.level: must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"bootstrap.n_boot: must be >= 1, got {n_boot}")
    for label, ref in references.items():
        if ref not in decisions:
            raise ValueError(f"bootstrap reference '{label}': '{ref}' is not an evaluated router ({sorted(decisions)})")
    n = scores.shape[0]
    idx = np.arange(n)
    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, n, size=n) for _ in range(n_boot)]  # shared by every router: the pairing
    quality = {k: scores[idx, d] for k, d in decisions.items()}  # (N,) per-prompt quality
    q_boot = {k: np.array([q[r].mean() for r in samples]) for k, q in quality.items()}  # (B,)
    a_point = {k: apgr_on_rows(idx, s, scores, costs, weak, strong, num_thresholds) for k, s in strong_scores.items()}
    a_boot = {k: np.array([apgr_on_rows(r, s, scores, costs, weak, strong, num_thresholds) for r in samples])
              for k, s in strong_scores.items()}
    out: dict[str, dict[str, dict[str, float | bool]]] = {}
    for name in decisions:
        entry: dict[str, dict[str, float | bool]] = {}
        if name in a_boot:
            entry["apgr"] = _interval(a_point[name], a_boot[name], level).to_dict()
        for label, ref in references.items():
            if ref == name:
                continue
            d_q = float(quality[name].mean() - quality[ref].mean())
            entry[f"quality_minus_{label}"] = _interval(d_q, q_boot[name] - q_boot[ref], level).to_dict()
            if name in a_boot and ref in a_boot:
                entry[f"apgr_minus_{label}"] = _interval(a_point[name] - a_point[ref], a_boot[name] - a_boot[ref],
                                                         level).to_dict()
        out[name] = entry
    return out
