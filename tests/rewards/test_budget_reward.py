"""ToolRL-style budget reward: 1 within budget_B, then max(min_reward, 1 - slope (C - B) / B)."""

from __future__ import annotations

import pytest

from rlrouter.rewards.base import RewardConfigError
from rlrouter.rewards.budget import INVALID_CALL, ToolBudgetReward, parse_tool_calls

WEIGHTS = {"search": 1.0, "calculator": 0.5, "gpt-4": 3.0}


def calls(*lines: str) -> str:
    body = "\n".join(lines)
    return f"<think>plan</think>\n<tool_call>\n{body}\n</tool_call>\n<response>ok</response>"


SEARCH = '{"name": "search", "parameters": {"query": "x"}}'
CALC = '{"name": "calculator", "parameters": {"expr": "1+1"}}'


def test_formula_by_hand():
    r = ToolBudgetReward(budget_B=2.0, cost_weights=WEIGHTS)
    texts = [
        "<think>no tools</think><answer>x</answer>",  # C = 0 -> 1
        calls(SEARCH, CALC),  # C = 1.5 -> 1
        calls(SEARCH, SEARCH),  # C = 2 = B -> 1
        calls(SEARCH, SEARCH, CALC),  # C = 2.5 -> 1 - 0.5 / 2 = 0.75
        calls(SEARCH) + calls(SEARCH, SEARCH),  # two blocks, C = 3 -> 0.5
        calls(*[SEARCH] * 6),  # C = 6 -> max(0, 1 - 2) = 0
    ]
    assert r(None, texts) == pytest.approx([1.0, 1.0, 1.0, 0.75, 0.5, 0.0])
    assert r.last_costs == pytest.approx([0.0, 1.5, 2.0, 2.5, 3.0, 6.0])
    assert r.last_metrics["rollout/over_budget_frac"] == pytest.approx(3 / 6)


def test_slope_and_floor():
    steep = ToolBudgetReward(budget_B=2.0, cost_weights=WEIGHTS, slope=2.0, min_reward=-1.0)
    # C = 3: 1 - 2 * 0.5 = 0; C = 6: 1 - 2 * 2 = -3 -> floor -1
    assert steep(None, [calls(SEARCH, SEARCH, SEARCH), calls(*[SEARCH] * 6)]) == [0.0, -1.0]


def test_unknown_and_invalid_calls_cost_the_default_weight():
    r = ToolBudgetReward(budget_B=1.0, cost_weights=WEIGHTS, default_weight=0.25)
    text = calls('{"name": "weather", "parameters": {}}', "not json {", '{"parameters": {}}', CALC)
    assert parse_tool_calls(text) == ["weather", INVALID_CALL, INVALID_CALL, "calculator"]
    # 0.25 * 3 + 0.5 = 1.25 -> 1 - 0.25 / 1 = 0.75
    assert r(None, [text]) == pytest.approx([0.75])


def test_router_r1_routes_are_tool_calls_priced_per_candidate():
    r = ToolBudgetReward(budget_B=2.0, cost_weights=WEIGHTS)
    text = ("<think>a</think><search>gpt-4: q</search><information>i <search>gpt-4: fake</search></information>"
            "<answer>x</answer>")
    # the <search> inside <information> is environment text, not a call: C = 3 -> 0.5
    assert parse_tool_calls(text) == ["gpt-4"]
    assert r(None, [text]) == [0.5]


def test_tool_calls_column_overrides_parsing():
    r = ToolBudgetReward(budget_B=2.0, cost_weights=WEIGHTS)
    out = r(None, [calls(SEARCH), "", ""],
            tool_calls=[["gpt-4"], [{"name": "calculator"}, {"name": "search"}], None])
    assert out == pytest.approx([0.5, 1.0, 1.0])  # gpt-4 = 3 -> 1 - 1 / 2
    with pytest.raises(TypeError, match=r"tool_calls\[0\]\[0\]"):
        r(None, [""], tool_calls=[[3]])


@pytest.mark.parametrize("kwargs, field", [
    ({"budget_B": 0}, "budget_B"),
    ({"budget_B": -1.0}, "budget_B"),
    ({"budget_B": "2"}, "budget_B"),
    ({"budget_B": 1, "cost_weights": {"search": -1}}, "cost_weights.search"),
    ({"budget_B": 1, "cost_weights": ["search"]}, "cost_weights"),
    ({"budget_B": 1, "slope": 0}, "slope"),
    ({"budget_B": 1, "min_reward": 2}, "min_reward"),
    ({"budget_B": 1, "default_weight": -0.5}, "default_weight"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(RewardConfigError) as e:
        ToolBudgetReward(**kwargs)
    assert e.value.field == field


def test_json_lists_and_candidate_names_with_colons():
    r = ToolBudgetReward(budget_B=4.0, cost_weights={"llama3:8b": 2.0, "search": 1.0})
    text = (calls('[{"name": "search"}, {"name": "search"}]')
            + "<search>llama3:8b: what is 2+2?</search><information>4</information>")
    assert parse_tool_calls(text, ["llama3:8b"]) == ["search", "search", "llama3:8b"]
    assert parse_tool_calls(text) == ["search", "search", "llama3"]  # unknown names split at the first ':'
    assert r(None, [text]) == [1.0]  # C = 4 = B
