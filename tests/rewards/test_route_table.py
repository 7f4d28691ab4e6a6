"""The ``route_table`` reward: a fixed reward per (question, candidate), read for each trajectory's first call."""

from __future__ import annotations

import pytest

from rlrouter.rewards.base import RewardConfigError
from rlrouter.rewards.registry import build_reward

TABLE = {"q1": {"big": 0.9, "small": 0.6}, "q2": {"big": 0.2, "Small": 0.8}}


def test_first_call_scores_its_table_entry_by_id_or_prompt():
    fn = build_reward({"name": "route_table", "table": TABLE, "no_call": -0.5})
    got = fn(["same text", "same text", "q1", "x"], ["", "", "", ""],
             tool_calls=[["big", "small"], ["small"], ["small"], []], id=["q1", "q2", None, "q2"])
    assert got == [0.9, 0.8, 0.6, -0.5]  # by id (case-blind names), by prompt, no call
    assert fn.last_metrics["reward/route_table"] == pytest.approx((0.9 + 0.8 + 0.6 - 0.5) / 4)


def test_a_question_outside_the_table_and_bad_entries_are_errors_naming_them():
    fn = build_reward({"name": "route_table", "table": TABLE})
    with pytest.raises(KeyError, match="q9"):
        fn(["q9"], [""], tool_calls=[["big"]], id=["q9"])
    with pytest.raises(RewardConfigError, match=r"table\['q1'\]\['big'\]"):
        build_reward({"name": "route_table", "table": {"q1": {"big": "high"}}})
    with pytest.raises(RewardConfigError, match="table"):
        build_reward({"name": "route_table", "table": {}})
