"""The algorithm registry: GRPO and PPO by name, the learner's uniform calls, and clear errors."""

from __future__ import annotations

import pytest
import torch

from rlrouter.algos import registry
from rlrouter.algos.grpo import GRPOConfig, compute_grpo_advantages, grpo_loss
from rlrouter.algos.ppo import PPOConfig, compute_ppo_advantages, ppo_loss
from rlrouter.algos.registry import (
    get_adv_estimator,
    get_algo_config,
    get_policy_loss,
    register_adv_est,
    register_policy_loss,
)
from rlrouter.learner.config import LearnerConfig

T = torch.tensor


def test_built_in_algorithms_are_registered_by_name():
    assert get_algo_config("grpo") is GRPOConfig and get_algo_config("ppo") is PPOConfig
    assert (GRPOConfig().adv_estimator, GRPOConfig().policy_loss) == ("grpo", "grpo")
    assert (PPOConfig().adv_estimator, PPOConfig().policy_loss) == ("gae", "ppo")
    assert not get_adv_estimator("grpo").critic and get_adv_estimator("gae").critic


@pytest.mark.parametrize("lookup,kind", [(get_algo_config, "learner.algo"), (get_adv_estimator, "adv_estimator"),
                                         (get_policy_loss, "policy_loss")])
def test_unknown_name_lists_the_registered_ones(lookup, kind):
    with pytest.raises(ValueError, match=rf"{kind}: unknown 'reinforce', registered: \[.*'grpo'.*\]"):
        lookup("reinforce")


def test_learner_config_rejects_an_unknown_estimator_or_loss_early():
    with pytest.raises(ValueError, match=r"adv_estimator: unknown 'vtrace', registered: "
                                         r"\['batch_std', 'gae', 'grpo', 'rloo'\]"):
        LearnerConfig(grpo={"adv_estimator": "vtrace"})
    with pytest.raises(ValueError, match=r"policy_loss: unknown 'gspo', registered: \['grpo', 'ppo'\]"):
        LearnerConfig(algo="ppo", ppo={"policy_loss": "gspo"})
    with pytest.raises(ValueError, match=r"learner.algo: unknown 'dpo', registered: \['grpo', 'ppo'\]"):
        LearnerConfig(algo="dpo")


def test_a_name_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="adv_estimator 'grpo' is already registered"):
        register_adv_est("grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="policy_loss 'ppo' is already registered"):
        register_policy_loss("ppo")(lambda *a, **k: None)
    assert get_policy_loss("ppo") is registry.POLICY_LOSSES["ppo"]  # the original kept


def _batch():
    mask = T([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    logp = T([[0.0, -1.0, -0.5], [0.0, -0.2, 0.0], [0.0, -0.7, -0.1], [0.0, 0.0, -2.0]])
    return T([1.0, 0.0, 0.5, 0.0]), mask, logp


def test_registered_grpo_matches_its_functions():
    rewards, mask, logp = _batch()
    cfg = GRPOConfig(group_size=2)
    adv, returns = get_adv_estimator("grpo")(rewards, mask, cfg, values=None, old_logp=None, ref_logp=None)
    assert returns is None and torch.equal(adv, compute_grpo_advantages(rewards, mask, cfg))
    loss, m = get_policy_loss("grpo")(logp, logp - 0.1, adv, mask, cfg, values=None, old_values=None,
                                      returns=None, ref_logp=None, entropy=None)
    want, want_m = grpo_loss(logp, logp - 0.1, adv, mask, cfg)
    assert torch.equal(loss, want) and m == want_m


def test_registered_ppo_matches_its_functions_and_needs_a_critic():
    rewards, mask, logp = _batch()
    cfg = PPOConfig()
    values = T([[0.0, 0.5, 0.2], [0.0, 0.1, 0.0], [0.0, 0.3, 0.4], [0.0, 0.0, 0.1]])
    adv, returns = get_adv_estimator("gae")(rewards, mask, cfg, values=values, old_logp=None, ref_logp=None)
    want_adv, want_ret = compute_ppo_advantages(rewards, values, mask, cfg)
    assert torch.equal(adv, want_adv) and torch.equal(returns, want_ret)
    loss, m = get_policy_loss("ppo")(logp, logp - 0.1, adv, mask, cfg, values=values + 0.1, old_values=values,
                                     returns=returns, ref_logp=None, entropy=None)
    want, want_m = ppo_loss(logp, logp - 0.1, adv, values + 0.1, values, returns, mask, cfg)
    assert torch.equal(loss, want) and m == want_m
    with pytest.raises(ValueError, match="adv_estimator 'gae': needs the critic's values"):
        get_adv_estimator("gae")(rewards, mask, cfg, values=None)
    with pytest.raises(ValueError, match="policy_loss 'ppo': needs values"):
        get_policy_loss("ppo")(logp, logp, adv, mask, cfg)
