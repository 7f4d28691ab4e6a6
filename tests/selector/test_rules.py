"""The closed-form rules of the rl_driven selector on hand-computed numbers."""

import math

import pytest

from rlrouter.selector import rules
from rlrouter.selector.rules import Beta


def test_blend_on_beta_parameters():
    # global Beta(3, 5), user Beta(7, 2), b = 0.7:
    # alpha = 0.3*3 + 0.7*7 = 5.8 ; beta = 0.3*5 + 0.7*2 = 2.9
    b = rules.blend(Beta(3, 5), Beta(7, 2), 0.7)
    assert b.alpha == pytest.approx(5.8) and b.beta == pytest.approx(2.9)
    # then the category scope Beta(2, 6) at 0.3: alpha = 0.7*5.8 + 0.3*2 = 4.66 ; beta = 0.7*2.9 + 0.3*6 = 3.83
    c = rules.blend(b, Beta(2, 6), 0.3)
    assert c.alpha == pytest.approx(4.66) and c.beta == pytest.approx(3.83)
    assert rules.blend(Beta(3, 5), Beta(7, 2), 0.0) == Beta(3, 5)
    assert rules.blend(Beta(3, 5), Beta(7, 2), 1.0) == Beta(7, 2)


def test_exploration_decay():
    assert rules.exploration_rate(0) == pytest.approx(0.3)
    # one decay step per 100 selections: 0.3 * 0.99 = 0.297
    assert rules.exploration_rate(100) == pytest.approx(0.297)
    # 0.3 * 0.99 ** 10 = 0.271314...
    assert rules.exploration_rate(1000) == pytest.approx(0.3 * 0.9043820750088043)
    # 0.3 * 0.99 ** 1.5 = 0.295508...
    assert rules.exploration_rate(150) == pytest.approx(0.3 * 0.99 ** 1.5)
    # 0.3 * 0.99 ** 200 = 0.0402 < 0.05: the floor holds
    assert rules.exploration_rate(20_000) == 0.05
    # crossing point: 0.3 * 0.99 ** (n / 100) = 0.05  <=>  n = 100 ln(1/6) / ln(0.99) = 17827.4
    assert rules.exploration_rate(17_827) > 0.05
    assert rules.exploration_rate(17_828) == 0.05


def test_session_weight():
    # score 0.8, the model won 2 of 3 in this session, w = 0.5: 0.5*0.8 + 0.5*(2/3) = 0.73333
    assert rules.session_adjust(0.8, 2 / 3, 0.5) == pytest.approx(0.7333333333)
    assert rules.session_adjust(0.8, None, 0.5) == 0.8  # no session history: unchanged
    assert rules.session_adjust(0.8, 0.0, 0.3) == pytest.approx(0.56)


def test_cost_bonus():
    costs = {"big": 20.0, "small": 0.6, "mid": 10.3}
    # normalised cost: big 1, small 0, mid (10.3 - 0.6) / 19.4 = 0.5
    assert rules.normalised_cost("mid", costs) == pytest.approx(0.5)
    # score 0.6: big 0.6 * (1 + 0 * 0.2) = 0.6 ; small 0.6 * 1.2 = 0.72 ; mid 0.6 * 1.1 = 0.66
    assert rules.cost_bonus(0.6, rules.normalised_cost("big", costs), 0.2) == pytest.approx(0.6)
    assert rules.cost_bonus(0.6, rules.normalised_cost("small", costs), 0.2) == pytest.approx(0.72)
    assert rules.cost_bonus(0.6, rules.normalised_cost("mid", costs), 0.2) == pytest.approx(0.66)
    assert rules.normalised_cost("unknown", costs) is None
    assert rules.normalised_cost("a", {"a": 1.0, "b": 1.0}) is None  # equal prices: no bonus


def test_outcome_and_tie_updates():
    assert rules.outcome_delta("win") == (1.0, 0.0)
    assert rules.outcome_delta("loss") == (0.0, 1.0)
    assert rules.outcome_delta("tie") == (0.5, 0.5)
    # implicit: weight = 0.5 * confidence 0.8 = 0.4; a tie adds 0.2 to each
    assert rules.outcome_delta("tie", 0.4) == pytest.approx((0.2, 0.2))
    with pytest.raises(ValueError, match="outcome"):
        rules.outcome_delta("draw")


def test_reward_is_a_fractional_win():
    assert rules.reward_delta(0.7) == pytest.approx((0.7, 0.3))
    assert rules.reward_delta(-1.0) == (0.0, 1.0)  # format penalty: a full loss
    assert rules.reward_delta(1.4) == (1.0, 0.0)
    with pytest.raises(ValueError):
        rules.reward_delta(math.nan)


def test_beta_moments():
    b = Beta(2, 6)
    assert b.mean == pytest.approx(0.25)
    assert b.variance == pytest.approx(2 * 6 / (8 * 8 * 9))
