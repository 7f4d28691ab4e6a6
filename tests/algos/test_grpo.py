"""GRPO advantages and loss against hand-computed values, and a tiny policy that learns with them."""

from __future__ import annotations

import math

import pytest
import torch

from rlrouter.algos.common import KLConfig, token_logprobs, token_logprobs_and_entropy
from rlrouter.algos.grpo import GRPOConfig, compute_grpo_advantages, grpo_advantages, grpo_loss
from rlrouter.rollout.parsing import TrajectoryTokens, collate

T = torch.tensor


def close(a, b, atol: float = 1e-5) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=atol)


def sgd_step(params: list[tuple[torch.Tensor, float]], loss: torch.Tensor) -> None:
    """Plain SGD by hand: the first use of ``torch.optim`` imports torch._dynamo, seconds a unit test can skip."""
    grads = torch.autograd.grad(loss, [p for p, _ in params], allow_unused=True)
    with torch.no_grad():
        for (p, lr), g in zip(params, grads, strict=True):
            if g is not None:
                p -= lr * g


# ---------------------------------------------------------------- advantages


def test_group_advantages_by_hand():
    rewards = T([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 2.0])
    adv = grpo_advantages(rewards, group_size=4)
    # group 1: mean 0.5, Bessel std sqrt((4 * 0.25) / 3) = 0.57735 -> +-0.5 / 0.57735 = +-0.866025
    # group 2: mean 2, deviations 1, -1, 0, 0, std sqrt(2 / 3) = 0.816497 -> +-1.224745, 0
    a, b = 0.5 / math.sqrt(1 / 3), 1 / math.sqrt(2 / 3)
    assert close(adv, [a, -a, -a, a, b, -b, 0.0, 0.0])


def test_group_with_equal_rewards_has_zero_advantage_not_nan():
    adv = grpo_advantages(T([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), group_size=3)
    assert torch.isfinite(adv).all() and torch.equal(adv, torch.zeros(6))


def test_dr_grpo_does_not_divide_by_std():
    adv = grpo_advantages(T([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 2.0]), group_size=4, scale_by_std=False)
    assert close(adv, [0.5, -0.5, -0.5, 0.5, 1.0, -1.0, 0.0, 0.0])


def test_group_advantages_reject_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="rewards"):
        grpo_advantages(T([1.0, 0.0, 1.0]), group_size=2)


def test_token_advantages_broadcast_on_policy_tokens_only():
    mask = T([[0, 1, 1, 0], [0, 1, 0, 1]])
    adv = compute_grpo_advantages(T([1.0, 0.0]), mask, GRPOConfig(group_size=2, scale_by_std=True))
    a = 0.5 / math.sqrt(0.5)  # mean 0.5, Bessel std sqrt(0.5) = 0.707107
    assert close(adv, [[0.0, a, a, 0.0], [0.0, -a, 0.0, -a]])


def test_kl_in_reward_enters_the_group_comparison():
    # both trajectories are correct, but the first one drifted from the reference: k1 sum 0.3 + 0.1 = 0.4
    mask = T([[0, 1, 1], [0, 1, 1]])
    old_logp = T([[0.0, -1.0, -1.0], [0.0, -1.0, -1.0]])
    ref_logp = T([[0.0, -1.3, -1.1], [0.0, -1.0, -1.0]])
    cfg = GRPOConfig(group_size=2, scale_by_std=True, kl={"coef": 0.5, "estimator": "k1", "in_reward": True})
    adv = compute_grpo_advantages(T([1.0, 1.0]), mask, cfg, old_logp, ref_logp)
    # rewards 1 - 0.5 * 0.4 = 0.8 and 1.0 -> -+0.1 / std(0.1414) = -+0.707107
    a = 0.1 / math.sqrt(0.02)
    assert close(adv, [[0.0, -a, -a], [0.0, a, a]])
    with pytest.raises(ValueError, match="ref_logp"):
        compute_grpo_advantages(T([1.0, 1.0]), mask, cfg)


# ---------------------------------------------------------------- loss


def _loss_case():
    mask = T([[0, 1, 1], [0, 1, 0]])
    old_logp = torch.zeros(2, 3)
    # ratios 1.5 and 0.5 in the first trajectory, 1.1 in the second; 9.0 sits on a masked position
    logp = T([[0.0, math.log(1.5), math.log(0.5)], [0.0, math.log(1.1), 9.0]]).requires_grad_(True)
    adv = T([[0.0, 1.0, -1.0], [0.0, 2.0, 0.0]])
    ref_logp = torch.zeros(2, 3)
    entropy = T([[0.0, 1.0, 2.0], [0.0, 3.0, 100.0]])
    return logp, old_logp, adv, mask, ref_logp, entropy


# k3 = (1/r - 1) + log r, since ref_logp = 0 = old_logp and logp = log r
K3 = [(1 / r - 1) + math.log(r) for r in (1.5, 0.5, 1.1)]  # 0.072132, 0.306853, 0.004401


def test_grpo_loss_by_hand():
    logp, old_logp, adv, mask, ref_logp, entropy = _loss_case()
    cfg = GRPOConfig(group_size=2, entropy_coef=0.01, kl=KLConfig(coef=0.1, estimator="k3"))
    loss, metrics = grpo_loss(logp, old_logp, adv, mask, cfg, ref_logp=ref_logp, entropy=entropy)
    # pg per token: A=1 r=1.5 -> -1.2 (clipped), A=-1 r=0.5 -> 0.8 (clipped), A=2 r=1.1 -> -2.2
    pg = (-1.2 + 0.8 - 2.2) / 3  # -0.866667
    kl = sum(K3) / 3  # 0.127796
    ent = (1.0 + 2.0 + 3.0) / 3  # masked 100 left out
    assert close(metrics["learner/pg_loss"], pg)
    assert close(metrics["learner/kl"], kl)
    assert close(metrics["learner/entropy"], ent)
    assert close(metrics["learner/clipfrac"], 2 / 3)
    assert close(loss, pg + 0.1 * kl - 0.01 * ent)  # -0.873887
    assert close(metrics["learner/loss"], loss.item())
    loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[1, 2] == 0  # the masked token gets no gradient


def test_grpo_loss_seq_mean_token_mean():
    logp, old_logp, adv, mask, _, _ = _loss_case()
    loss, metrics = grpo_loss(logp, old_logp, adv, mask, GRPOConfig(group_size=2, loss_agg_mode="seq-mean-token-mean"))
    # trajectory 1: (-1.2 + 0.8) / 2 = -0.2, trajectory 2: -2.2 -> mean -1.2
    assert close(loss, -1.2)
    assert "learner/kl" not in metrics and "learner/entropy" not in metrics


def test_kl_in_reward_is_reported_but_not_in_the_loss():
    logp, old_logp, adv, mask, ref_logp, _ = _loss_case()
    cfg = GRPOConfig(group_size=2, kl=KLConfig(coef=0.1, estimator="k3", in_reward=True))
    loss, metrics = grpo_loss(logp, old_logp, adv, mask, cfg, ref_logp=ref_logp)
    assert close(loss, (-1.2 + 0.8 - 2.2) / 3) and close(metrics["learner/kl"], sum(K3) / 3)


def test_grpo_loss_requires_what_its_config_uses():
    logp, old_logp, adv, mask, _, _ = _loss_case()
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old_logp, adv, mask, GRPOConfig(group_size=2, kl=KLConfig(coef=0.1)))
    with pytest.raises(ValueError, match="entropy"):
        grpo_loss(logp, old_logp, adv, mask, GRPOConfig(group_size=2, entropy_coef=0.01))


@pytest.mark.parametrize("kwargs, field", [
    ({"group_size": 1}, "group_size"), ({"clip_eps_low": 1.0}, "clip_eps_low"),
    ({"clip_eps_high": 0.0}, "clip_eps_high"), ({"loss_agg_mode": "sum"}, "loss_agg_mode"),
    ({"entropy_coef": -1.0}, "entropy_coef"), ({"eps": 0.0}, "eps"),
    ({"kl": {"coef": 0.1, "estimator": "k9"}}, "kl.estimator"),
])
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(**kwargs)


def test_config_accepts_a_kl_mapping():
    cfg = GRPOConfig(kl={"coef": 0.001, "estimator": "k3"})
    assert isinstance(cfg.kl, KLConfig) and cfg.kl.in_loss


# ---------------------------------------------------------------- end to end on a tiny policy


class TinyPolicy(torch.nn.Module):
    """A next-token table: logits for the next token depend on the current token only."""

    def __init__(self, vocab: int = 4):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)
        torch.nn.init.zeros_(self.table.weight)  # uniform start

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table(input_ids)  # (B, T, V)


def test_grpo_teaches_a_tiny_policy_to_prefer_the_rewarded_token():
    """Sample -> TrajectoryTokens -> collate -> advantages -> loss -> step, as the learner will run it.

    Prompt token 0, then the policy picks token a; an observation token 3 follows (masked), then the
    policy picks token b. Reward 1 iff a == 2.
    """
    torch.manual_seed(0)
    policy = TinyPolicy()
    params = [(policy.table.weight, 2.0)]
    cfg = GRPOConfig(group_size=8, entropy_coef=0.001, kl=KLConfig(coef=0.01, estimator="k3"))
    reference = TinyPolicy()
    for _ in range(25):
        with torch.no_grad():
            p_first = torch.softmax(policy.table.weight[0], -1)
            p_after_obs = torch.softmax(policy.table.weight[3], -1)
        trajectories, rewards = [], []
        for _ in range(2 * cfg.group_size):  # 2 prompts x G samples
            a = int(torch.multinomial(p_first, 1))
            b = int(torch.multinomial(p_after_obs, 1))
            tr = TrajectoryTokens([0])
            tr.add_policy([a], [math.log(p_first[a])])
            tr.add_observation([3])
            tr.add_policy([b], [math.log(p_after_obs[b])])
            trajectories.append(tr)
            rewards.append(1.0 if a == 2 else 0.0)
        batch = collate(trajectories, pad_token_id=0)
        mask = batch["loss_mask"]
        with torch.no_grad():
            ref_logp = token_logprobs(reference(batch["input_ids"]), batch["input_ids"])
        advantages = compute_grpo_advantages(T(rewards), mask, cfg)
        logp, entropy = token_logprobs_and_entropy(policy(batch["input_ids"]), batch["input_ids"])
        # the rollout's log-probs are the learner's: the first step's ratio is exactly 1
        assert close(logp.detach() * mask, batch["old_logprobs"])
        loss, metrics = grpo_loss(logp, batch["old_logprobs"], advantages, mask, cfg, ref_logp=ref_logp,
                                  entropy=entropy)
        assert metrics["learner/clipfrac"] == 0.0
        sgd_step(params, loss)
    p_first = torch.softmax(policy.table.weight[0], -1)
    assert p_first[2] > 0.9
    # rows 1 and 2 only ever predict the observation token (masked): no gradient may reach them
    assert torch.equal(policy.table.weight[1:3], torch.zeros(2, 4))


def test_the_default_advantage_is_the_reward_minus_the_group_mean():
    """Logged rewards are fixed per (question, candidate): the default does not divide by the group's std, so
    a 0.04 gap between two samples counts 0.04, not as much as a right/wrong gap (rlrouter.algos.bandit)."""
    assert GRPOConfig().scale_by_std is False
    mask = torch.ones(4, 1)
    small = compute_grpo_advantages(T([0.90, 0.86, 0.90, 0.86]), mask, GRPOConfig(group_size=4))
    large = compute_grpo_advantages(T([0.90, 0.00, 0.90, 0.00]), mask, GRPOConfig(group_size=4))
    assert close(small.squeeze(-1), [0.02, -0.02, 0.02, -0.02]) and close(large.squeeze(-1), [0.45, -0.45, 0.45, -0.45])
    with_std = GRPOConfig(group_size=4, scale_by_std=True)
    assert close(compute_grpo_advantages(T([0.90, 0.86, 0.90, 0.86]), mask, with_std),
                 compute_grpo_advantages(T([0.90, 0.00, 0.90, 0.00]), mask, with_std), atol=1e-3)


def test_a_well_formed_baseline_keeps_a_format_failure_from_lifting_its_group():
    """Two well-formed samples that score alike and one failure: with the group's mean as baseline both
    well-formed samples gain from the failure; with the well-formed mean only the failure moves."""
    from rlrouter.algos.grpo import GRPOConfig, compute_grpo_advantages, grpo_advantages

    r = torch.tensor([0.8, 0.8, -1.0, 0.5, 0.3, 0.1])
    formed = torch.tensor([True, True, False, False, False, False])
    plain = grpo_advantages(r, 3, scale_by_std=False)
    assert plain[0] > 0.5 and plain[1] > 0.5
    adv = grpo_advantages(r, 3, scale_by_std=False, well_formed=formed)
    assert torch.allclose(adv[:3], torch.tensor([0.0, 0.0, -1.8]))
    assert torch.allclose(adv[3:], plain[3:])  # a group with no well-formed sample: its own mean
    cfg = GRPOConfig(group_size=3, scale_by_std=False, baseline="well_formed")
    tok = compute_grpo_advantages(r, torch.ones(6, 2), cfg, well_formed=formed)
    assert torch.allclose(tok[:, 0], adv)
    with pytest.raises(ValueError, match="not told which samples"):
        compute_grpo_advantages(r, torch.ones(6, 2), cfg)
    with pytest.raises(ValueError, match="baseline"):
        GRPOConfig(baseline="valid")
    with pytest.raises(ValueError, match="adv_estimator grpo"):
        GRPOConfig(baseline="well_formed", adv_estimator="rloo")
