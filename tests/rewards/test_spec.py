"""The Router-R1 reward's settings, typed once (``rlrouter.rewards.spec``): found alone or inside a combined
reward, checked where the config is read, and the one object the run's evaluations score with."""

import pytest

from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.rewards.spec import RewardSpec


def test_the_spec_is_found_alone_inside_combined_and_defaults_without_one():
    assert RewardSpec.from_reward({"name": "router_r1", "alpha": 0.36, "metric": "f1"}) == RewardSpec(0.36, 512, "f1")
    combined = {"name": "combined", "functions": [{"name": "length"},
                                                 {"name": "router_r1", "params": {"alpha": 0.2, "cost_window": 64}}]}
    assert RewardSpec.from_reward(combined) == RewardSpec(0.2, 64, "em")
    assert RewardSpec.from_reward({"name": "length"}) == RewardSpec()


def test_a_bad_setting_fails_naming_it():
    for bad, field in (({"alpha": 1.5}, "reward.alpha"), ({"metric": "bleu"}, "reward.metric"),
                       ({"cost_window": 0}, "reward.cost_window")):
        with pytest.raises(ValueError, match=field):
            RouterR1TrainConfig(reward={"name": "router_r1", **bad}).reward_spec
    cfg = RouterR1TrainConfig(reward={"name": "router_r1", "alpha": 0.36})
    assert cfg.reward_spec.alpha == 0.36 and cfg.reward_spec.metric == "em"
