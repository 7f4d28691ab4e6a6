"""IPS, SNIPS and DR against hand-computed values, and their intervals' coverage on a simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlrouter.eval.ope import (
    LoggedFeedback,
    crossfit_reward_model,
    epsilon_soft,
    estimate,
    evaluate_all,
    one_hot,
    simulate_logging,
)

LOG = LoggedFeedback(actions=np.array([0, 1, 1]), propensities=np.array([0.5, 0.25, 0.5]),
                     rewards=np.array([1.0, 0.0, 1.0]))
TARGET = one_hot(np.array([0, 1, 0]), 2)  # weights 2, 4, 0
Q = np.array([[0.5, 0.5], [0.2, 0.8], [0.6, 0.4]])


def test_ips_snips_dr_by_hand():
    assert estimate("ips", TARGET, LOG).value == pytest.approx((2 * 1 + 4 * 0 + 0) / 3)
    assert estimate("snips", TARGET, LOG).value == pytest.approx(2 / 6)
    # DR terms: 0.5 + 2 (1 - 0.5) = 1.5; 0.8 + 4 (0 - 0.8) = -2.4; 0.6 + 0 = 0.6 -> mean -0.1
    assert estimate("dr", TARGET, LOG, q_hat=Q).value == pytest.approx(-0.1)


def test_clt_interval_by_hand():
    e = estimate("ips", TARGET, LOG, ci="clt", level=0.95)
    sd = np.std([2.0, 0.0, 0.0], ddof=1)  # sqrt(4/3)
    half = 1.959964 * sd / math.sqrt(3)
    assert e.lo == pytest.approx(2 / 3 - half, rel=1e-5) and e.hi == pytest.approx(2 / 3 + half, rel=1e-5)
    assert e.covers(0.5) and not e.covers(5.0)


def test_bootstrap_interval_contains_estimate_and_is_seeded():
    a = estimate("snips", TARGET, LOG, ci="bootstrap", rng=np.random.default_rng(1))
    b = estimate("snips", TARGET, LOG, ci="bootstrap", rng=np.random.default_rng(1))
    assert a.lo <= a.value <= a.hi and (a.lo, a.hi) == (b.lo, b.hi)


def test_epsilon_soft_and_validation():
    p = epsilon_soft(np.array([0, 2]), 3, 0.3)
    np.testing.assert_allclose(p, [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]])
    with pytest.raises(ValueError, match="epsilon"):
        epsilon_soft(np.array([0]), 2, 0.0)
    with pytest.raises(ValueError, match="propensities"):
        LoggedFeedback(actions=np.array([0]), propensities=np.array([0.0]), rewards=np.array([1.0]))
    with pytest.raises(ValueError, match="estimator"):
        estimate("magic", TARGET, LOG)
    with pytest.raises(ValueError, match="q_hat"):
        estimate("dr", TARGET, LOG)


def test_simulate_logging_follows_the_logging_policy():
    rng = np.random.default_rng(0)
    n = 20_000
    probs = np.tile([0.2, 0.8], (n, 1))
    rewards = np.tile([1.0, 0.0], (n, 1))
    log = simulate_logging(probs, rewards, rng)
    assert np.mean(log.actions == 0) == pytest.approx(0.2, abs=0.01)
    assert np.all(log.rewards == (log.actions == 0))
    assert np.all(log.propensities == np.where(log.actions == 0, 0.2, 0.8))


def test_crossfit_reward_model_never_sees_its_own_sample():
    groups = ["a"] * 4
    log = LoggedFeedback(actions=np.array([0, 0, 0, 0]), propensities=np.ones(4) * 0.5,
                         rewards=np.array([1.0, 1.0, 0.0, 0.0]))
    q = crossfit_reward_model(groups, log, 2, n_folds=4, prior=0.0, seed=0)
    # with one sample per fold (leave-one-out when folds differ) q of row i excludes r_i
    folds = np.random.default_rng(0).integers(0, 4, size=4)
    for i in range(4):
        others = [j for j in range(4) if folds[j] != folds[i]]
        if others:
            assert q[i, 0] == pytest.approx(np.mean(log.rewards[others]))


def test_estimators_cover_the_true_value_on_a_simulation():
    """Unbiasedness and 95% coverage of the CLT intervals over 200 logs of a known environment."""
    rng = np.random.default_rng(0)
    n, m = 400, 2
    groups = rng.integers(0, 4, size=n)
    p_correct = np.array([[0.3, 0.9], [0.8, 0.9], [0.5, 0.6], [0.9, 0.5]])[groups]  # (N, M)
    rewards = (rng.random((n, m)) < p_correct).astype(float)
    base = np.zeros(n, dtype=int)  # log: epsilon-soft over always-0
    target = np.where(groups == 0, 1, 0)  # the new router sends group 0 to candidate 1
    truth = rewards[np.arange(n), target].mean()
    pi0 = epsilon_soft(base, m, 0.4)
    hits = {e: 0 for e in ("ips", "snips", "dr")}
    values = {e: [] for e in hits}
    trials = 200
    for s in range(trials):
        log = simulate_logging(pi0, rewards, np.random.default_rng(100 + s))
        q = crossfit_reward_model(groups.astype(str), log, m, seed=s)
        for name, est in evaluate_all(one_hot(target, m), log, q).items():
            hits[name] += est.covers(truth)
            values[name].append(est.value)
    for name in hits:
        assert np.mean(values[name]) == pytest.approx(truth, abs=0.02), name
        assert hits[name] / trials >= 0.88, (name, hits[name])
