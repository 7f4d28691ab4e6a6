"""Off-policy evaluation: a new router's value from another policy's logged bandit feedback.

Logged bandit feedback is, per prompt x_i, the action a_i a logging policy pi_0 took, its propensity
pi_0(a_i | x_i) and the reward r_i of that action only. A target policy pi (a router, as an (N, M)
matrix of action probabilities; a deterministic router is one-hot) is valued by

* IPS:   V = 1/n sum_i w_i r_i,  w_i = pi(a_i|x_i) / pi_0(a_i|x_i)                (Horvitz-Thompson)
* SNIPS: V = sum_i w_i r_i / sum_i w_i                                        (Swaminathan & Joachims 2015)
* DR:    V = 1/n sum_i [ sum_a pi(a|x_i) q(x_i, a) + w_i (r_i - q(x_i, a_i)) ] (Dudik et al. 2011)

with q a reward model fitted on the logged feedback alone (cross-fitted, so q never sees the
sample it corrects). Confidence intervals: CLT on the per-sample terms (delta method for SNIPS) or
the percentile bootstrap over prompts. ``simulate_logging`` draws the logged feedback from full
outcome tables, so an estimate can be checked against the router's true replayed value.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from rlrouter.routers.traffic_router import cell_rewards

ESTIMATORS = ("ips", "snips", "dr")


@dataclass(frozen=True)
class LoggedFeedback:
    """Bandit feedback: one action, its propensity and its reward per prompt; optionally a second, explored
    action per prompt (the Serve app's ``serving.traffic.explore_share``: -1 where none), drawn with a logged
    probability ``explored_propensities`` among the actions other than the logged one.

    The explored reward counts only on rows whose logged action was certain (propensity 1: a frozen router's
    route), where ``P(action observed) = P(explored)`` exactly; on a row whose logging policy was itself random,
    only its logged action counts."""

    actions: np.ndarray  # (N,) int
    propensities: np.ndarray  # (N,) pi_0(a_i | x_i) > 0
    rewards: np.ndarray  # (N,)
    explored: np.ndarray | None = None  # (N,) int, -1: none
    explored_propensities: np.ndarray | None = None  # (N,) > 0 where explored
    explored_rewards: np.ndarray | None = None  # (N,)

    def __post_init__(self) -> None:
        n = len(self.actions)
        if len(self.propensities) != n or len(self.rewards) != n:
            raise ValueError("logged feedback: actions, propensities and rewards need one entry per prompt")
        if n == 0:
            raise ValueError("logged feedback: empty")
        if not np.all(np.asarray(self.propensities) > 0):
            raise ValueError("logged feedback.propensities: must all be > 0 (IPS divides by them)")
        if self.explored is not None:
            ex = [self.explored_propensities, self.explored_rewards]
            if any(a is None or len(a) != n for a in ex) or len(self.explored) != n:
                raise ValueError("logged feedback: explored, explored_propensities and explored_rewards need one "
                                 "entry per prompt")
            if not np.all(np.asarray(self.explored_propensities)[np.asarray(self.explored) >= 0] > 0):
                raise ValueError("logged feedback.explored_propensities: must be > 0 where a row explored")


@dataclass(frozen=True)
class Estimate:
    estimator: str
    value: float
    lo: float
    hi: float
    ci: str  # "clt" or "bootstrap"
    level: float

    def covers(self, truth: float) -> bool:
        return self.lo <= truth <= self.hi

    def to_dict(self) -> dict[str, float | str]:
        return {"estimator": self.estimator, "value": self.value, "lo": self.lo, "hi": self.hi,
                "ci": self.ci, "level": self.level}


def one_hot(decisions: np.ndarray, num_actions: int) -> np.ndarray:
    """(N, M) action probabilities of a deterministic router."""
    d = np.asarray(decisions, dtype=np.int64)
    out = np.zeros((len(d), num_actions))
    out[np.arange(len(d)), d] = 1.0
    return out


def epsilon_soft(base_decisions: np.ndarray, num_actions: int, epsilon: float) -> np.ndarray:
    """(N, M) pi_0 = (1 - eps) * base + eps * uniform: every action keeps probability >= eps / M."""
    if not 0.0 < epsilon <= 1.0:
        raise ValueError(f"epsilon: must be in (0, 1] so every action has a propensity > 0, got {epsilon}")
    return (1.0 - epsilon) * one_hot(base_decisions, num_actions) + epsilon / num_actions


def simulate_logging(logging_probs: np.ndarray, reward_table: np.ndarray,
                     rng: np.random.Generator) -> LoggedFeedback:
    """Draw a_i ~ pi_0(. | x_i) and reveal only r_i = reward_table[i, a_i]."""
    p = np.asarray(logging_probs, dtype=np.float64)
    if p.shape != reward_table.shape:
        raise ValueError(f"logging_probs {p.shape} and reward_table {reward_table.shape} must match")
    u = rng.random(len(p))[:, None]
    actions = (np.cumsum(p, axis=1) < u).sum(axis=1).clip(0, p.shape[1] - 1)
    rows = np.arange(len(p))
    return LoggedFeedback(actions=actions, propensities=p[rows, actions], rewards=reward_table[rows, actions])


def crossfit_reward_model(groups: Sequence[str], logged: LoggedFeedback, num_actions: int, n_folds: int = 2,
                          prior: float = 5.0, seed: int = 0) -> np.ndarray:
    """(N, M) q(x_i, a): mean logged reward of action a among prompts of the same group (task),
    shrunk toward that action's overall mean with ``prior`` pseudo-counts, fitted on the other folds.

    Uses only the logged (x, a, r), never the unobserved rewards. Cross-fitting keeps each prompt's
    own reward out of its q, which DR's unbiasedness argument needs when q is fitted on the same log.
    """
    n = len(logged.actions)
    g = np.asarray(groups)
    if len(g) != n:
        raise ValueError("groups: one per logged prompt")
    folds = np.random.default_rng(seed).integers(0, n_folds, size=n)
    q = np.zeros((n, num_actions))
    a, r = np.asarray(logged.actions), np.asarray(logged.rewards, dtype=np.float64)
    for f in range(n_folds):
        fit, pred = folds != f, folds == f
        if not pred.any():
            continue
        for act in range(num_actions):
            sel = fit & (a == act)
            overall = r[sel].mean() if sel.any() else r[fit].mean() if fit.any() else 0.0
            for name in np.unique(g[pred]):
                in_g = sel & (g == name)
                denom = in_g.sum() + prior
                q[pred & (g == name), act] = (r[in_g].sum() + prior * overall) / denom if denom > 0 else overall
    return q


def estimator_terms(estimator: str, target_probs: np.ndarray, logged: LoggedFeedback,
                    q_hat: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample numerators and weights: V = sum(num) / sum(den) (den = 1 except for SNIPS)."""
    rows = np.arange(len(logged.actions))
    w = target_probs[rows, logged.actions] / logged.propensities  # (N,)
    r = np.asarray(logged.rewards, dtype=np.float64)
    # the explored action: its own weight where the logged one was certain (see LoggedFeedback)
    if logged.explored is not None:
        e = np.asarray(logged.explored)
        on = (e >= 0) & (np.asarray(logged.propensities) >= 1.0)
        ea = np.where(on, e, 0)
        we = np.where(on, target_probs[rows, ea] / np.where(on, logged.explored_propensities, 1.0), 0.0)
        re = np.where(on, np.asarray(logged.explored_rewards, dtype=np.float64), 0.0)
    else:
        ea, we, re = np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows)), np.zeros(len(rows))
    if estimator == "ips":
        return w * r + we * re, np.ones_like(w)
    if estimator == "snips":
        return w * r + we * re, w + we
    if estimator == "dr":
        if q_hat is None:
            raise ValueError("dr: needs a reward model q_hat (N, M)")
        dm = (target_probs * q_hat).sum(axis=1)
        return dm + w * (r - q_hat[rows, logged.actions]) + we * (re - q_hat[rows, ea]), np.ones_like(w)
    raise ValueError(f"estimator: unknown '{estimator}', expected one of {ESTIMATORS}")


def estimate(estimator: str, target_probs: np.ndarray, logged: LoggedFeedback, q_hat: np.ndarray | None = None,
             ci: str = "clt", level: float = 0.95, n_boot: int = 1000,
             rng: np.random.Generator | None = None, boot_idx: np.ndarray | None = None) -> Estimate:
    """Value of the target policy with a ``level`` confidence interval (``ci``: "clt" or "bootstrap").

    ``boot_idx`` (B, N) fixes the bootstrap resamples, so several estimators or targets on one log
    share them (paired comparisons, and one draw instead of many).
    """
    target_probs = np.asarray(target_probs, dtype=np.float64)
    if target_probs.shape[0] != len(logged.actions):
        raise ValueError(f"target_probs: {target_probs.shape[0]} rows for {len(logged.actions)} logged prompts")
    num, den = estimator_terms(estimator, target_probs, logged, q_hat)
    n = len(num)
    value = float(num.sum() / den.sum()) if den.sum() > 0 else float("nan")
    if ci == "clt":
        z = NormalDist().inv_cdf(0.5 + level / 2)
        # SNIPS by the delta method: the influence of sample i is w_i (r_i - V) / mean(w)
        infl = (num - value * den) / den.mean() if estimator == "snips" else num
        se = float(np.std(infl, ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
        return Estimate(estimator, value, value - z * se, value + z * se, ci, level)
    if ci == "bootstrap":
        idx = boot_idx if boot_idx is not None else (rng or np.random.default_rng(0)).integers(0, n, size=(n_boot, n))  # (B, N)
        sums_den = den[idx].sum(axis=1)
        boots = num[idx].sum(axis=1) / np.where(sums_den > 0, sums_den, np.nan)
        lo, hi = np.nanquantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
        return Estimate(estimator, value, float(lo), float(hi), ci, level)
    raise ValueError(f"ci: expected 'clt' or 'bootstrap', got '{ci}'")


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(B, N) resamples of N prompts with replacement."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def evaluate_all(target_probs: np.ndarray, logged: LoggedFeedback, q_hat: np.ndarray, ci: str = "clt",
                 level: float = 0.95, n_boot: int = 1000, seed: int = 0,
                 boot_idx: np.ndarray | None = None) -> dict[str, Estimate]:
    """IPS, SNIPS and DR for one target policy on one log (bootstrap resamples shared by the three)."""
    if ci == "bootstrap" and boot_idx is None:
        boot_idx = bootstrap_indices(len(logged.actions), n_boot, seed)
    return {e: estimate(e, target_probs, logged, q_hat, ci=ci, level=level, n_boot=n_boot, boot_idx=boot_idx)
            for e in ESTIMATORS}


def off_policy(router: Any, table: Any, level: float = 0.95) -> dict[str, Any]:
    """IPS, SNIPS and DR estimates of ``router``'s (a ``TrafficKNNRouter``) mean reward on ``table``'s (a
    ``TrafficTable``) requests, from the logging policy's propensities (rows without one are left out and counted). DR's reward model is the router's own
    prediction, fitted on other rows than these."""
    keep = np.flatnonzero((table.logged >= 0) & np.isfinite(table.propensity) & (table.propensity > 0))
    if len(keep) < 2:
        raise ValueError(f"off-policy estimate: {len(keep)} rows with a logged route and propensity; need >= 2")
    t = table.rows(keep)
    if t.names != router.names:
        raise ValueError(f"off-policy estimate: the log's candidates {t.names} are not the router's {router.names}")
    q_hat = router.reward_hat(t.embed(router.embed))
    target = q_hat.argmax(axis=1)
    rewards = cell_rewards(t, router.cost_weight)
    rows = np.arange(len(t))
    r0 = rewards[rows, t.logged]
    usable = np.isfinite(r0)
    ex = (t.explored >= 0) & np.isfinite(t.explored_propensity) & (t.explored_propensity > 0)
    ex &= np.isfinite(rewards[rows, np.maximum(t.explored, 0)])
    logged = LoggedFeedback(t.logged[usable], t.propensity[usable], r0[usable],
                            explored=np.where(ex, t.explored, -1)[usable],
                            explored_propensities=np.where(ex, t.explored_propensity, 1.0)[usable],
                            explored_rewards=np.where(ex, rewards[rows, np.maximum(t.explored, 0)], 0.0)[usable])
    probs = np.eye(len(t.names))[target[usable]]
    est = evaluate_all(probs, logged, q_hat[usable], level=level)
    return {"rows": int(usable.sum()), "left_out": int(len(table) - usable.sum()),
            "explored_rows": int(ex[usable].sum()),
            "agrees_with_logged": float((target[usable] == t.logged[usable]).mean()),
            **{k: e.to_dict() for k, e in est.items()}}
