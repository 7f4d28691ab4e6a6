"""Router-R1 combination: correct -> (1 + format)(1 - alpha) + alpha * cost; wrong -> format."""

from __future__ import annotations

import math

import pytest

from rlrouter.rewards.base import RewardConfigError
from rlrouter.rewards.router_r1 import RouterR1Reward, RouterR1Score, combine

CANDS = ["gpt-4", "mixtral"]
GOOD = "<think>a</think><search>mixtral: q</search><information>i</information><think>b</think><answer>{}</answer>"
BAD = "<answer>{}</answer>"  # does not start with <think>: format -1


def test_combine_formula_by_hand():
    assert combine(0.0, 1.0, 0.25, alpha=0.4) == pytest.approx(0.6 + 0.1)
    assert combine(-1.0, 1.0, 0.25, alpha=0.4) == pytest.approx(0.1)
    assert combine(0.0, 0.0, 0.25, alpha=0.4) == 0.0
    assert combine(-1.0, 0.0, 1.0, alpha=0.4) == -1.0
    assert combine(0.0, 1.0, None, alpha=0.0) == 1.0
    # F1 partial credit interpolates between the wrong and the correct score
    assert combine(0.0, 0.5, 1.0, alpha=0.5) == pytest.approx(0.5)


def test_four_cases_by_hand():
    # sqrt costs [4, 0, 2, 3]; sorted [0, 2, 3, 4]: 5th pct 0.3, 95th 3.85
    # cost rewards: A 0 (above 95th), B 1, C 1 - 1.7/3.55, D 1 - 2.7/3.55
    reward = RouterR1Reward(alpha=0.4, candidates=CANDS, cost_window=8)
    texts = [GOOD.format("Paris"), BAD.format("Paris"), GOOD.format("Rome"), BAD.format("Rome")]
    scores = reward.score(["q"] * 4, texts, ground_truth=[["Paris"]] * 4, route_costs=[16.0, 0.0, 4.0, 9.0])
    c_c, c_d = 1 - 1.7 / 3.55, 1 - 2.7 / 3.55
    assert [s.format for s in scores] == [0.0, -1.0, 0.0, -1.0]
    assert [s.outcome for s in scores] == [1.0, 1.0, 0.0, 0.0]
    assert [s.cost for s in scores] == pytest.approx([0.0, 1.0, c_c, c_d])
    assert [s.total for s in scores] == pytest.approx([0.6, 0.4, 0.0, -1.0])
    assert scores[1].failure == "does not start with <think>"
    assert reward.last_metrics == pytest.approx({
        "reward/format": -0.5, "reward/outcome": 0.5, "reward/cost": (1 + c_c + c_d) / 4, "reward/total": 0.0})
    assert reward(["q"] * 4, texts, ground_truth=[["Paris"]] * 4, route_costs=[16.0, 0.0, 4.0, 9.0]) == \
        pytest.approx([s.total for s in reward.last_scores])


def test_unknown_model_in_a_correct_answer_loses_the_format_bonus():
    reward = RouterR1Reward(alpha=0.0, candidates=CANDS)
    text = "<think>a</think><search>claude: q</search><information>i</information><answer>Paris</answer>"
    [s] = reward.score(None, [text], ground_truth=[["Paris"]])
    assert (s.format, s.outcome, s.cost, s.total) == (-1.0, 1.0, None, 0.0)
    assert "unknown candidate 'claude'" in s.failure


def test_alpha_zero_needs_no_cost_columns_but_alpha_positive_does():
    reward = RouterR1Reward(alpha=0.0, candidates=CANDS)
    assert reward(None, [GOOD.format("x")], ground_truth=["x"]) == [1.0]
    assert math.isnan(reward.last_metrics["reward/cost"])
    with pytest.raises(KeyError, match="alpha=0.3 needs a 'route_costs' or 'route_tokens' column"):
        RouterR1Reward(alpha=0.3, candidates=CANDS)(None, [GOOD.format("x")], ground_truth=["x"])


def test_f1_metric_gives_partial_totals():
    reward = RouterR1Reward(alpha=0.5, candidates=CANDS, metric="f1")
    # F1 0.8; one sample -> cost reward 1; correct score (1)(0.5) + 0.5 = 1; total 0.8
    out = reward(None, [GOOD.format("Eiffel Tower Paris")], ground_truth=[["the Eiffel Tower"]], route_costs=[0.01])
    assert out == pytest.approx([0.8])


def test_route_tokens_with_candidate_prices_end_to_end():
    from rlrouter.pool.base import Candidate

    cands = [Candidate("gpt-4", 10.0, 30.0), Candidate("mixtral", 0.6, 0.6)]
    reward = RouterR1Reward(alpha=0.5, candidates=cands, cost_window=16)
    cheap = GOOD.format("Paris")
    dear = cheap.replace("mixtral:", "gpt-4:")
    out = reward(None, [cheap, dear], ground_truth=[["Paris"]] * 2, route_tokens=[[300], [300]])
    # both correct and well formed; the cheap route costs less -> higher reward
    assert out[0] == pytest.approx(1.0) and out[1] == pytest.approx(0.5)


def test_state_and_config_errors():
    a = RouterR1Reward(alpha=0.5, candidates=CANDS, cost_window=4)
    a(None, [GOOD.format("x")] * 3, ground_truth=["x"] * 3, route_costs=[0.1, 0.2, 0.3])
    b = RouterR1Reward(alpha=0.5, candidates=CANDS, cost_window=4)
    b.load_state_dict(a.state_dict())
    kw = dict(ground_truth=["x"] * 2, route_costs=[0.15, 0.25])
    assert a(None, [GOOD.format("x")] * 2, **kw) == b(None, [GOOD.format("x")] * 2, **kw)
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(RewardConfigError, match="field 'alpha'"):
            RouterR1Reward(alpha=bad, candidates=CANDS)
    with pytest.raises(RewardConfigError, match=r"field 'candidates\[1\]'"):
        RouterR1Reward(alpha=0.5, candidates=["a", 3])
    assert RouterR1Score(0.0, 1.0, None, 1.0).to_dict()["cost"] is None


def test_fixed_cost_bounds_replace_the_window():
    """cost_bounds: the reference scale (the job's, from the training questions' calls): the same call earns
    the same cost reward whatever else is in the batch."""
    from rlrouter.trainer.router_r1 import resolve_cost_bounds
    from rlrouter.rewards.base import RewardConfigError
    from rlrouter.rewards.router_r1 import RouterR1CostReward

    fixed = RouterR1CostReward(prices={"m": 1.0}, cost_bounds=[0.01, 0.11])
    # sqrt(0.0036) = 0.06 -> halfway -> 0.5, alone or beside a dearer call
    assert fixed(["q"], ["x"], route_costs=[0.0036]) == pytest.approx([0.5])
    assert fixed(["q", "q"], ["x", "y"], route_costs=[0.0036, 0.04]) == pytest.approx([0.5, 0.0])
    window = RouterR1CostReward(prices={"m": 1.0})
    assert window(["q"], ["x"], route_costs=[0.0036]) == pytest.approx([1.0])  # alone in its window
    for bad in ("reference", [0.2, 0.1], [0.1], "x"):
        with pytest.raises(RewardConfigError, match="cost_bounds"):
            RouterR1CostReward(cost_bounds=bad)
    cfg = {"name": "combined", "functions": [{"name": "router_r1", "alpha": 0.3, "cost_bounds": "reference"}]}
    assert resolve_cost_bounds(cfg, (0.01, 0.11))["functions"][0]["cost_bounds"] == [0.01, 0.11]
    assert resolve_cost_bounds(cfg, None)["functions"][0]["cost_bounds"] is None  # live pool: the window
