"""PPO: GAE over policy tokens, the clipped value loss and the full loss against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlrouter.algos.common import KLConfig, token_logprobs
from rlrouter.algos.ppo import PPOConfig, ValueHead, compute_ppo_advantages, gae, ppo_loss, value_loss
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


# one trajectory: prompt token, two policy tokens, two <information> tokens, one last policy token.
# The observation tokens carry absurd values (7.0) and the prompt 9.0: none of them may leak in.
MASK = T([[0, 1, 1, 0, 0, 1]])
VALUES = T([[9.0, 0.5, 0.4, 7.0, 7.0, 0.6]])
REWARDS = T([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])


def test_gae_skips_observation_tokens_by_hand():
    adv, ret = gae(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8)
    # backwards over policy tokens 5, 2, 1 (gamma * lam = 0.72):
    #   t=5: delta = 1 + 0.9 * 0 - 0.6 = 0.4;             A = 0.4
    #   t=2: delta = 0 + 0.9 * 0.6 - 0.4 = 0.14;           A = 0.14 + 0.72 * 0.4 = 0.428
    #   t=1: delta = 0 + 0.9 * 0.4 - 0.5 = -0.14;          A = -0.14 + 0.72 * 0.428 = 0.16816
    assert close(adv, [[0.0, 0.16816, 0.428, 0.0, 0.0, 0.4]])
    assert close(ret, [[0.0, 0.16816 + 0.5, 0.428 + 0.4, 0.0, 0.0, 1.0]])


def test_gae_with_gamma_lambda_one_is_return_minus_value():
    adv, ret = gae(REWARDS, VALUES, MASK, gamma=1.0, lam=1.0)
    assert close(adv, [[0.0, 0.5, 0.6, 0.0, 0.0, 0.4]])
    assert close(ret, [[0.0, 1.0, 1.0, 0.0, 0.0, 1.0]])


def test_gae_with_lambda_zero_is_one_step_td():
    adv, _ = gae(REWARDS, VALUES, MASK, gamma=1.0, lam=0.0)
    # delta_1 = V(2) - V(1) = -0.1, delta_2 = V(5) - V(2) = 0.2 (not V(3) = 7), delta_5 = 1 - 0.6
    assert close(adv, [[0.0, -0.1, 0.2, 0.0, 0.0, 0.4]])


def test_gae_batch_rows_are_independent_and_padding_is_zero():
    mask = torch.cat([MASK, T([[0, 1, 0, 0, 0, 0]]), torch.zeros(1, 6, dtype=torch.long)])
    values = torch.cat([VALUES, T([[0.0, 0.25, 5.0, 5.0, 5.0, 5.0]]), torch.full((1, 6), 3.0)])
    rewards = torch.cat([REWARDS, T([[0.0, -1.0, 0.0, 0.0, 0.0, 0.0]]), torch.zeros(1, 6)])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert close(adv, [[0.0, 0.5, 0.6, 0.0, 0.0, 0.4], [0.0, -1.25, 0, 0, 0, 0], [0.0] * 6])
    assert close(ret, [[0.0, 1.0, 1.0, 0.0, 0.0, 1.0], [0.0, -1.0, 0, 0, 0, 0], [0.0] * 6])


def test_gae_rejects_reward_on_a_token_the_policy_did_not_generate():
    with pytest.raises(ValueError, match="token_rewards"):
        gae(T([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]]), VALUES, MASK)


def test_ppo_advantages_are_whitened_after_returns():
    cfg = PPOConfig(gamma=1.0, lam=1.0, whiten_advantages=True)
    adv, ret = compute_ppo_advantages(T([1.0]), VALUES, MASK, cfg)
    # raw 0.5, 0.6, 0.4 -> mean 0.5, Bessel std 0.1 -> 0, 1, -1; returns stay the real ones
    assert close(adv, [[0.0, 0.0, 1.0, 0.0, 0.0, -1.0]], atol=1e-4)
    assert close(ret, [[0.0, 1.0, 1.0, 0.0, 0.0, 1.0]])


def test_ppo_kl_in_reward_by_hand():
    mask = T([[0, 1, 1, 0, 1]])
    old_logp = T([[0.0, -1.0, -1.0, 0.0, -1.0]])
    ref_logp = T([[0.0, -1.5, -0.5, 0.0, -1.0]])  # k1 = 0.5, -0.5, 0 on the policy tokens
    cfg = PPOConfig(whiten_advantages=False, kl=KLConfig(coef=0.1, estimator="k1", in_reward=True))
    adv, ret = compute_ppo_advantages(T([1.0]), torch.zeros(1, 5), mask, cfg, old_logp, ref_logp)
    # token rewards -0.05, +0.05, 1.0 -> with zero values, A = reward-to-go: 1.0, 1.05, 1.0
    assert close(adv, [[0.0, 1.0, 1.05, 0.0, 1.0]]) and close(ret, adv)
    with pytest.raises(ValueError, match="ref_logp"):
        compute_ppo_advantages(T([1.0]), torch.zeros(1, 5), mask, cfg)


# ---------------------------------------------------------------- value loss


def _value_case():
    #           clip binds   inside     equal      masked
    old_values = T([[0.0, 0.0, 1.0, 0.0]])
    values = T([[1.0, 1.0, 1.2, 100.0]]).requires_grad_(True)
    returns = T([[2.0, 0.0, 1.0, 0.0]])
    mask = T([[1, 1, 1, 0]])
    return values, old_values, returns, mask


def test_value_loss_by_hand():
    values, old_values, returns, mask = _value_case()
    loss, metrics = value_loss(values, old_values, returns, mask, value_clip=0.5)
    # token a: V_clip = 0.5: max((1-2)^2, (0.5-2)^2) = 2.25   (the clipped branch wins)
    # token b: V_clip = 0.5: max((1-0)^2, (0.5-0)^2) = 1.0
    # token c: |1.2 - 1.0| < 0.5, V_clip = V: 0.04
    assert close(loss, 0.5 * (2.25 + 1.0 + 0.04) / 3)  # 0.548333
    assert close(metrics["learner/value_loss"], 0.5 * 3.29 / 3)
    assert close(metrics["learner/vf_clipfrac"], 1 / 3)
    loss.backward()
    # d/dV: a is clipped (constant in V) -> 0; b: (V - R) / 3 = 1/3; c: 0.2 / 3; masked -> 0
    assert close(values.grad, [[0.0, 1 / 3, 0.2 / 3, 0.0]])


def test_value_loss_without_clip_binding_is_half_mse():
    values, old_values, returns, mask = _value_case()
    loss, metrics = value_loss(values, old_values, returns, mask, value_clip=10.0)
    assert close(loss, 0.5 * (1.0 + 1.0 + 0.04) / 3) and metrics["learner/vf_clipfrac"] == 0.0


def test_ppo_loss_by_hand():
    mask = T([[0, 1, 1], [0, 1, 0]])
    logp = T([[0.0, math.log(1.5), math.log(0.5)], [0.0, math.log(1.1), 9.0]]).requires_grad_(True)
    old_logp = torch.zeros(2, 3)
    adv = T([[0.0, 1.0, -1.0], [0.0, 2.0, 0.0]])
    # the three value cases of test_value_loss_by_hand on the three policy tokens
    values = T([[0.0, 1.0, 1.0], [0.0, 1.2, 100.0]]).requires_grad_(True)
    old_values = T([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    returns = T([[0.0, 2.0, 0.0], [0.0, 1.0, 0.0]])
    entropy = T([[0.0, 1.0, 2.0], [0.0, 3.0, 100.0]])
    cfg = PPOConfig(vf_coef=0.5, entropy_coef=0.01, kl=KLConfig(coef=0.1, estimator="k3", in_reward=False))
    loss, metrics = ppo_loss(logp, old_logp, adv, values, old_values, returns, mask, cfg,
                             ref_logp=torch.zeros(2, 3), entropy=entropy)
    pg = (-1.2 + 0.8 - 2.2) / 3  # as in the GRPO test: two clipped tokens and one inside
    vf = 0.5 * (2.25 + 1.0 + 0.04) / 3
    kl = sum((1 / r - 1) + math.log(r) for r in (1.5, 0.5, 1.1)) / 3
    ent = 2.0
    assert close(metrics["learner/pg_loss"], pg) and close(metrics["learner/value_loss"], vf)
    assert close(metrics["learner/kl"], kl) and close(metrics["learner/entropy"], ent)
    assert close(loss, pg + 0.5 * vf + 0.1 * kl - 0.01 * ent)  # -0.599721
    loss.backward()
    assert close(values.grad, [[0.0, 0.0, 0.5 / 3], [0.0, 0.5 * 0.2 / 3, 0.0]])


@pytest.mark.parametrize("kwargs, field", [
    ({"gamma": 1.5}, "gamma"), ({"lam": -0.1}, "lam"), ({"value_clip": 0.0}, "value_clip"),
    ({"vf_coef": -1.0}, "vf_coef"), ({"clip_eps_low": 0.0}, "clip_eps_low"),
    ({"kl": {"coef": -1}}, "kl.coef"),
])
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PPOConfig(**kwargs)


def test_ppo_default_kl_lives_in_the_reward_with_k1():
    cfg = PPOConfig(kl={"coef": 0.001, "estimator": "k1", "in_reward": True})
    assert cfg.kl.enabled and not cfg.kl.in_loss
    assert PPOConfig().kl.estimator == "k1" and PPOConfig().kl.in_reward


# ---------------------------------------------------------------- the critic head


def test_value_head_by_hand_and_aligned_with_tokens():
    head = ValueHead(hidden_size=2)
    assert torch.equal(head.proj.bias.data, torch.zeros(1))
    with torch.no_grad():
        head.proj.weight.copy_(T([[1.0, -1.0]]))
        head.proj.bias.fill_(0.5)
    hidden = T([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]], dtype=torch.bfloat16)  # (B=1, T=3, H=2)
    # raw values 1.5, -0.5, 0.5; token t is chosen in the state read at position t - 1
    out = head(hidden)
    assert out.dtype == torch.float32 and close(out, [[0.0, 1.5, -0.5]])
    with pytest.raises(ValueError, match="hidden_size"):
        ValueHead(0)


def test_ppo_trains_a_tiny_policy_and_critic():
    """Sample -> TrajectoryTokens -> values -> GAE -> loss -> step, on a one-action bandit.

    Token 2 pays 1, the others 0. The critic reads an embedding of the current token; its value at
    the action must approach the policy's success rate while the policy learns to pick token 2.
    """
    torch.manual_seed(0)
    vocab = 4
    policy = torch.nn.Embedding(vocab, vocab)
    torch.nn.init.zeros_(policy.weight)
    features = torch.nn.Embedding(vocab, 8)
    head = ValueHead(8)
    params = [(policy.weight, 1.0), *((p, 0.1) for p in (*features.parameters(), *head.parameters()))]
    cfg = PPOConfig(whiten_advantages=True)
    for _ in range(30):
        with torch.no_grad():
            probs = torch.softmax(policy.weight[0], -1)
        trajectories, rewards = [], []
        for _ in range(16):
            a = int(torch.multinomial(probs, 1))
            tr = TrajectoryTokens([0])
            tr.add_policy([a], [math.log(probs[a])])
            trajectories.append(tr)
            rewards.append(float(a == 2))
        batch = collate(trajectories, pad_token_id=0)
        ids, mask = batch["input_ids"], batch["loss_mask"]
        with torch.no_grad():
            old_values = head(features(ids))
        advantages, returns = compute_ppo_advantages(T(rewards), old_values, mask, cfg)
        for _ in range(2):  # two PPO epochs over the same rollout: the second one has ratio != 1
            logp = token_logprobs(policy(ids), ids)
            values = head(features(ids))
            loss, metrics = ppo_loss(logp, batch["old_logprobs"], advantages, values, old_values, returns, mask, cfg)
            sgd_step(params, loss)
    p_good = torch.softmax(policy.weight[0], -1)[2].item()
    assert p_good > 0.9
    value_at_action = head(features(T([[0, 2]])))[0, 1].item()
    assert abs(value_at_action - p_good) < 0.25
