"""The contextual arm's closed-form rules on hand-computed numbers."""

import math
import random

import numpy as np
import pytest

from rlrouter.selector.contextual import INTERCEPT_PRIOR, LinearThompsonArm, reward_std


def test_prior_is_strong_on_weights_and_weak_on_the_intercept():
    arm = LinearThompsonArm(3, prior=4.0)
    np.testing.assert_allclose(arm.a_inv, np.diag([0.25, 0.25, 1.0 / INTERCEPT_PRIOR]))
    with pytest.raises(ValueError, match="prior"):
        LinearThompsonArm(3, prior=1.0, intercept_prior=0.0)


def test_reward_std_is_the_bernoulli_bound_at_the_beta_posterior_mean():
    assert reward_std(0.0, 0.0) == pytest.approx(0.5)  # Beta(1, 1): rbar = 1/2
    assert reward_std(0.0, 1.0) == pytest.approx(math.sqrt(1 / 3 * 2 / 3))  # rbar = 1/3
    assert reward_std(3.0, 4.0) == pytest.approx(math.sqrt(4 / 6 * 2 / 6))  # rbar = 4/6
    assert reward_std(1.5, 2.0) == pytest.approx(math.sqrt(0.625 * 0.375))  # fractional rewards: rbar = 2.5/4


def test_intercept_only_arm_on_hand_computed_numbers():
    # one feature (the intercept), prior 0.01; rewards 1, 0, 1, 0.5 with weights 1, 1, 1, 2
    arm = LinearThompsonArm(1, intercept_prior=0.01)
    x = np.array([1.0])
    for r, w in ((1.0, 1.0), (0.0, 1.0), (1.0, 1.0), (0.5, 2.0)):
        arm.update(x, r, w)
    # A = 0.01 + 5 = 5.01, b = 1 + 0 + 1 + 1 = 3, n = 5
    assert arm.n == 5.0 and arm.b[-1] == pytest.approx(3.0)
    assert arm.a_inv[0, 0] == pytest.approx(1 / 5.01)
    mean, std = arm.mean_and_std(x)
    assert mean == pytest.approx(3 / 5.01) and std == pytest.approx(math.sqrt(1 / 5.01))
    # noise scale: rbar = (1 + 3) / (2 + 5) = 4/7
    assert arm.reward_std == pytest.approx(math.sqrt(4 / 7 * 3 / 7))
    z = random.Random(7).gauss(0.0, 1.0)
    draw = arm.sample(x, 0.5, random.Random(7))
    assert draw == pytest.approx(3 / 5.01 + 0.5 * math.sqrt(4 / 7 * 3 / 7) * math.sqrt(1 / 5.01) * z)


def test_weak_intercept_prior_learns_the_mean_after_one_reward():
    # with a flat-ish intercept, one reward of 0.8 on a fresh arm puts its mean near 0.8 (a prior of 1
    # would halve it: one pseudo-reward of 0)
    arm = LinearThompsonArm(3, prior=100.0)
    x = np.array([0.6, 0.8, 1.0])
    arm.update(x, 0.8)
    assert arm.mean_and_std(x)[0] == pytest.approx(0.8, abs=0.02)
