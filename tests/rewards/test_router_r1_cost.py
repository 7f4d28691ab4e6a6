"""Router-R1 cost reward: sqrt, percentile min-max over a per-instance sliding window, 1 - scaled."""

from __future__ import annotations

import math

import pytest

from rlrouter.pool.base import Candidate
from rlrouter.rewards.base import RewardConfigError
from rlrouter.rewards.router_r1 import CostWindow, RouterR1CostReward, scale_cost


def cost_reward(costs, reward):
    return reward(None, ["x"] * len(costs), route_costs=costs)


def test_percentile_scaling_by_hand():
    # sqrt costs 0..4; 5th pct = 0.2, 95th = 3.8 (linear interpolation) -> scaled (s - 0.2) / 3.6
    r = RouterR1CostReward(cost_window=5)
    out = cost_reward([0.0, 1.0, 4.0, 9.0, 16.0], r)
    assert out == pytest.approx([1.0, 1 - 0.8 / 3.6, 0.5, 1 - 2.8 / 3.6, 0.0])
    assert r.last_raw_costs == [0.0, 1.0, 4.0, 9.0, 16.0]


def test_window_slides_and_is_per_instance():
    r = RouterR1CostReward(cost_window=5)
    cost_reward([0.0, 1.0, 4.0, 9.0, 16.0], r)
    # window now [1, 2, 3, 4, 2] (0 fell out): 5th pct = 1.2, 95th = 3.8 -> (2 - 1.2) / 2.6
    assert cost_reward([4.0], r) == pytest.approx([1 - 0.8 / 2.6])
    assert len(r.window) == 5
    # a fresh instance has its own window: one sample alone has no spread -> full reward
    assert cost_reward([4.0], RouterR1CostReward(cost_window=5)) == [1.0]


def test_percentiles_resist_outliers():
    # sqrt costs 0..19 and one outlier 100: 5th pct = 1, 95th = 19 -> sqrt cost 10 scales to 0.5
    r = RouterR1CostReward(cost_window=100)
    out = cost_reward([float(i * i) for i in range(20)] + [10000.0], r)
    assert out[10] == pytest.approx(0.5)
    assert out[-1] == 0.0 and out[0] == 1.0 and out[1] == 1.0


def test_zero_length_window_scales_each_batch_alone():
    r = RouterR1CostReward(cost_window=0)
    first = cost_reward([0.0, 1.0, 4.0, 9.0, 16.0], r)
    assert cost_reward([0.0, 1.0, 4.0, 9.0, 16.0], r) == first  # no memory
    assert cost_reward([4.0], r) == [1.0]
    assert len(r.window) == 0


def test_degenerate_window_without_spread():
    assert cost_reward([2.0, 2.0, 2.0], RouterR1CostReward()) == [1.0, 1.0, 1.0]
    r = RouterR1CostReward(cost_window=100)
    cost_reward([1.0] * 40, r)
    # window = 40 x 1.0 and one 2.0: both percentiles are 1.0; at the level -> 1, above it -> 0
    assert cost_reward([4.0], r) == [0.0]
    assert cost_reward([1.0], r) == [1.0]
    assert scale_cost(0.5, 1.0, 1.0) == 0.0 and scale_cost(1.5, 1.0, 1.0) == 1.0
    assert CostWindow(0).bounds([]) == (0.0, 0.0)


def test_same_batches_same_rewards_and_state_round_trip():
    batches = [[0.3, 0.1, 0.7], [0.2, 0.9], [0.05, 0.4, 0.4, 0.6]]
    a, b = RouterR1CostReward(cost_window=6), RouterR1CostReward(cost_window=6)
    assert [cost_reward(x, a) for x in batches] == [cost_reward(x, b) for x in batches]
    c = RouterR1CostReward(cost_window=6)
    c.load_state_dict(a.state_dict())
    assert cost_reward([0.25, 0.5], c) == cost_reward([0.25, 0.5], a)


def test_route_tokens_times_prices():
    prices = {"gpt-4": 30.0, "mixtral": 0.6}  # USD per 1M output tokens
    r = RouterR1CostReward(prices=prices)
    text = ("<think>a</think><search>gpt-4: q1</search><information>i</information>"
            "<search>mixtral: q2</search><information>j</information><answer>x</answer>")
    expected = (1000 * 30.0 + 2000 * 0.6) / 1e6
    r(None, [text, text, text, "<think>a</think><answer>x</answer>"],
      route_tokens=[[("gpt-4", 1000), ("mixtral", 2000)],
                    [{"model": "gpt-4", "completion_tokens": 1000}, {"model": "mixtral", "completion_tokens": 2000}],
                    [1000, 2000],  # aligned with the trajectory's <search> routes
                    []])
    assert r.last_raw_costs == pytest.approx([expected, expected, expected, 0.0])


def test_prices_from_pool_candidates():
    cands = [Candidate("gpt-4", price_in=10.0, price_out=30.0), Candidate("mixtral", 0.6, 0.6)]
    r = RouterR1CostReward(candidates=cands)
    r(None, ["x"], route_tokens=[[("mixtral", 500)]])
    assert r.last_raw_costs == pytest.approx([500 * 0.6 / 1e6])


def test_route_costs_lists_are_summed_and_absent_columns_are_not_applicable():
    r = RouterR1CostReward()
    r(None, ["a", "b", "c"], route_costs=[[0.1, 0.2], None, 0.05])
    assert r.last_raw_costs == pytest.approx([0.3, 0.0, 0.05])
    assert r(None, ["a", "b"]) == [None, None]


def test_bad_cost_inputs_fail_clearly():
    r = RouterR1CostReward(prices={"gpt-4": 30.0})
    with pytest.raises(KeyError, match="'claude'.*no price"):
        r(None, ["x"], route_tokens=[[("claude", 10)]])
    with pytest.raises(ValueError, match="route_tokens\\[0\\] has 1 counts but the trajectory has 0"):
        r(None, ["<think>a</think><answer>x</answer>"], route_tokens=[[10]])
    with pytest.raises(ValueError, match="cost of sample 1 is -1"):
        r(None, ["a", "b"], route_costs=[0.1, -1.0])
    with pytest.raises(ValueError, match="cost of sample 0 is nan"):
        r(None, ["a"], route_costs=[math.nan])


@pytest.mark.parametrize("kwargs, field", [
    ({"cost_window": -1}, "cost_window"),
    ({"cost_window": 2.5}, "cost_window"),
    ({"percentiles": (95, 5)}, "percentiles"),
    ({"percentiles": (5,)}, "percentiles"),
    ({"prices": {"gpt-4": -1.0}}, "prices.gpt-4"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(RewardConfigError) as e:
        RouterR1CostReward(**kwargs)
    assert e.value.field == field


def test_aligned_route_tokens_use_per_sample_candidates():
    r = RouterR1CostReward(prices={"llama3:8b": 0.2, "llama3": 5.0})
    text = "<think>a</think><search>llama3:8b: q</search><information>i</information><answer>x</answer>"
    r(None, [text, text], route_tokens=[[1000], [1000]], candidates=[["llama3:8b"], ["llama3"]])
    # sample 0 knows the name 'llama3:8b'; sample 1 only 'llama3', so the route reads 'llama3' + '8b: q'
    assert r.last_raw_costs == pytest.approx([1000 * 0.2 / 1e6, 1000 * 5.0 / 1e6])


def test_percentiles_must_be_a_pair_of_numbers():
    for bad in (5, "5,95", (5, "95")):
        with pytest.raises(RewardConfigError, match="field 'percentiles'"):
            RouterR1CostReward(percentiles=bad)
