"""build_reward: config dicts -> reward functions, with errors naming the bad field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrouter.rewards import REGISTRY, CombinedReward, RewardConfigError, build_reward, register_reward
from rlrouter.rewards.router_r1 import RouterR1Reward

MINIMAL = {
    "router_r1": {"alpha": 0.5, "candidates": ["a"]},
    "router_r1_format": {"candidates": ["a"]},
    "router_r1_outcome": {},
    "router_r1_cost": {},
    "tool_budget": {"budget_B": 2.0},
    "accuracy": {},
    "macro_f1": {},
    "calibration": {},
    "custom": {"fn": "rlrouter.rewards.router_r1:normalize_answer"},
    "route_table": {"table": {"q": {"a": 1.0}}},
}


def test_every_registered_reward_builds_and_has_a_name():
    assert set(MINIMAL) == set(REGISTRY)
    for name, params in MINIMAL.items():
        fn = build_reward({"name": name, **params})
        assert callable(fn) and isinstance(fn.__name__, str)


def test_flat_and_nested_params_are_the_same():
    flat = build_reward({"name": "router_r1", "alpha": 0.3, "candidates": ["a", "b"], "cost_window": 7})
    nested = build_reward({"name": "router_r1", "params": {"alpha": 0.3, "candidates": ["a", "b"], "cost_window": 7}})
    for r in (flat, nested):
        assert isinstance(r, RouterR1Reward)
        assert r.alpha == 0.3 and r.cost_reward.window.size == 7 and r.format_reward._candidates.fixed == ["a", "b"]


def test_combined_uses_weights_from_config():
    cfg = {"name": "combined", "functions": [
        {"name": "accuracy", "weight": 2.0},
        {"name": "calibration", "params": {"mode": "brier"}, "weight": 0.5},
    ]}
    reward = build_reward(cfg)
    assert isinstance(reward, CombinedReward) and reward.weights == [2.0, 0.5]
    # sample 0: right, conf 1 -> 2 * 1 + 0.5 * 1; sample 1: wrong, conf 1 -> 0 + 0.5 * -1; no conf -> accuracy only
    out = reward(None, ["a", "a", "a"], labels=["a", "b", "b"], confidences=[1.0, 1.0, None])
    assert out == pytest.approx([2.5, -0.5, 0.0])
    as_list = build_reward([{"name": "accuracy", "weight": 2.0}, {"name": "calibration", "weight": 0.5}])
    assert as_list(None, ["a", "a", "a"], labels=["a", "b", "b"], confidences=[1.0, 1.0, None]) == out


@pytest.mark.parametrize("cfg, field", [
    ({"alpha": 0.5}, "reward.name"),
    ({"name": "router_r2"}, "reward.name"),
    ({"name": "router_r1", "candidates": ["a"]}, "reward.alpha"),
    ({"name": "router_r1", "alpah": 0.5}, "reward.alpah"),
    ({"name": "router_r1", "params": {"alpha": 2.0}}, "reward.params.alpha"),
    ({"name": "router_r1", "alpha": 0.5, "cost_window": -3}, "reward.cost_window"),
    ({"name": "router_r1_cost", "prices": {"gpt-4": -1}}, "reward.prices.gpt-4"),
    ({"name": "router_r1", "alpha": 0.5, "params": {"alpha": 0.4}}, "reward.alpha"),
    ({"name": "router_r1", "params": [1]}, "reward.params"),
    ({"name": "combined", "functions": []}, "reward.functions"),
    ({"name": "combined", "functions": [{"name": "accuracy"}, {"name": "calibration", "mode": "x"}]},
     "reward.functions[1].mode"),
    ({"name": "combined", "functions": [{"name": "accuracy", "weight": "heavy"}]}, "reward.functions[0].weight"),
    ({"name": "combined", "functions": [{"name": "accuracy"}], "alpha": 1}, "reward.alpha"),
    ({"name": "custom", "fn": "rlrouter.rewards.nope:f"}, "reward.fn"),
    ({"name": "custom", "params": {"fn": "rlrouter.rewards.router_r1:normalize_answer", "bogus": 1}},
     "reward.params.bogus"),
    ("router_r1", "reward"),
])
def test_errors_name_the_bad_field(cfg, field):
    with pytest.raises(RewardConfigError) as e:
        build_reward(cfg)
    assert e.value.field == field, str(e.value)


def test_list_shorthand_paths():
    with pytest.raises(RewardConfigError) as e:
        build_reward([{"name": "accuracy"}, {"name": "tool_budget", "budget_B": 0}])
    assert e.value.field == "reward[1].budget_B"


def test_hydra_dictconfig_is_accepted():
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({"name": "combined", "functions": [
        {"name": "router_r1", "alpha": 0.2, "candidates": ["a"], "percentiles": [10, 90], "weight": 1.0}]})
    reward = build_reward(cfg)
    assert reward.functions[0].cost_reward.window.percentiles == (10.0, 90.0)


def test_register_reward():
    def factory(bonus: float):
        def fn(prompts, completions, **kwargs):
            return [bonus] * len(completions)
        return fn

    register_reward("test_bonus", factory)
    try:
        assert build_reward({"name": "test_bonus", "bonus": 2.0})(None, ["a"]) == [2.0]
        with pytest.raises(RewardConfigError) as e:
            build_reward({"name": "test_bonus"})
        assert e.value.field == "reward.bonus"
        with pytest.raises(ValueError, match="already registered"):
            register_reward("accuracy", factory)
    finally:
        REGISTRY.pop("test_bonus")


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "conf" / "reward").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_reward_group_builds_as_the_trainer_builds_it(path):
    """conf/reward/*.yaml through the loop's builder, with the pool's candidates filled in: each scores
    a valid trajectory above a broken one."""
    from omegaconf import OmegaConf

    from rlrouter.learner.config import RouterR1TrainConfig
    from rlrouter.trainer.router_r1 import build_train_reward

    # the job sets the reference cost scale (cost_bounds: reference) from the training questions' calls
    reference = {"cost_bounds": [0.005, 0.07], "strong": "gpt-4"}
    train = RouterR1TrainConfig(reward=OmegaConf.to_container(OmegaConf.load(path)), eval_reference=reference)
    reward = build_train_reward(train, ["gpt-4", "mixtral"])
    good = "<think>x</think><search>mixtral: what?</search><information>4</information><think>y</think><answer>4</answer>"
    bad = "<think>x</think><search>mistral: what?</search>"
    r = reward(["q", "q"], [good, bad], ground_truth=[["4"], ["4"]], route_costs=[1e-5, 0.0],
               tool_calls=[["mixtral"], []], candidate_models=[None, None])
    assert r[0] > r[1]
