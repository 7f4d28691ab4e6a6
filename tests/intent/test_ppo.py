"""PPO pieces against hand-computed values, and the wiring of the classification rewards."""

import math

import pytest
import torch

from rlrouter.intent.ppo import IntentPPOConfig, RolloutBuffer, compute_gae, episode_dones, ppo_losses, score
from rlrouter.intent.reward import resolve_reward


def test_gae_one_query_episodes_is_reward_minus_value():
    r = torch.tensor([1.0, 0.0, 1.0])
    v = torch.tensor([0.4, 0.3, 0.9])
    adv, ret = compute_gae(r, v, episode_dones(3, 1), last_value=7.0, gamma=0.99, gae_lambda=0.95)
    assert torch.allclose(adv, torch.tensor([0.6, -0.3, 0.1]))
    assert torch.allclose(ret, r)


def test_gae_three_step_episode_by_hand():
    r = torch.tensor([1.0, 0.0, 2.0])
    v = torch.tensor([0.5, 0.2, 1.0])
    adv, ret = compute_gae(r, v, torch.tensor([0.0, 0.0, 1.0]), last_value=0.0, gamma=0.99, gae_lambda=0.95)
    # t2: d = 2 - 1 = 1                      A2 = 1
    # t1: d = 0 + .99*1.0 - .2 = .79          A1 = .79 + .99*.95*1 = 1.7305
    # t0: d = 1 + .99*.2 - .5 = .698          A0 = .698 + .9405*1.7305 = 2.32553525
    assert torch.allclose(adv, torch.tensor([2.32553525, 1.7305, 1.0]))
    assert torch.allclose(ret, torch.tensor([2.82553525, 1.9305, 2.0]))


def test_gae_bootstraps_only_a_non_terminal_last_step():
    r = torch.tensor([1.0, 1.0])
    v = torch.tensor([0.3, 0.4])
    adv, _ = compute_gae(r, v, torch.tensor([1.0, 0.0]), last_value=0.5, gamma=0.99, gae_lambda=0.95)
    # t1: 1 + .99*.5 - .4 = 1.095 ; t0 is terminal: 1 - .3 = .7 (nothing flows back across the boundary)
    assert torch.allclose(adv, torch.tensor([0.7, 1.095]))


def test_buffer_finish_and_minibatch_trim():
    buf = RolloutBuffer(texts=["a", "b"], input_ids=torch.tensor([[1, 2, 3, 0], [1, 2, 0, 0]]),
                        attention_mask=torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]),
                        actions=torch.tensor([0, 1]), logprobs=torch.zeros(2), values=torch.tensor([0.5, 0.5]),
                        rewards=torch.tensor([1.0, 0.0]), dones=torch.ones(2))
    buf.finish(0.99, 0.95)
    assert torch.allclose(buf.advantages, torch.tensor([0.5, -0.5]))
    mb = buf.minibatch(torch.tensor([1]))
    assert mb["input_ids"].tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="actions"):
        RolloutBuffer(texts=["a"], input_ids=torch.zeros(1, 2), attention_mask=torch.ones(1, 2),
                      actions=torch.zeros(2), logprobs=torch.zeros(1), values=torch.zeros(1),
                      rewards=torch.zeros(1), dones=torch.ones(1))


def test_ppo_losses_by_hand():
    logits = torch.zeros(2, 2, requires_grad=True)  # π = (.5, .5) for both queries
    values = torch.tensor([0.5, 0.0])
    old = torch.log(torch.tensor([0.25, 0.5]))  # ratios 2 and 1
    adv = torch.tensor([1.0, -1.0])
    ret = torch.tensor([1.0, 1.0])
    out = ppo_losses(logits, values, torch.tensor([0, 1]), old, adv, ret, clip_coef=0.2, ent_coef=0.01,
                     vf_coef=0.5, norm_adv=False)
    # sample 0: max(-1*2, -1*1.2) = -1.2 ; sample 1: max(1*1, 1*1) = 1 -> mean -0.1
    assert out.pg_loss.item() == pytest.approx(-0.1)
    assert out.entropy.item() == pytest.approx(math.log(2))
    assert out.v_loss.item() == pytest.approx(0.5 * (0.25 + 1.0) / 2)
    assert out.approx_kl.item() == pytest.approx((1 - math.log(2)) / 2)
    assert out.clipfrac.item() == pytest.approx(0.5)
    assert out.loss.item() == pytest.approx(-0.1 - 0.01 * math.log(2) + 0.5 * 0.3125)
    out.loss.backward()
    # the clipped sample gives no policy gradient; only entropy (zero at uniform) and sample 1 remain
    assert logits.grad[0].abs().sum().item() == pytest.approx(0.0, abs=1e-6)
    assert logits.grad[1].abs().sum().item() > 0


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="minibatch_size"):
        IntentPPOConfig(batch_size=10, minibatch_size=4)
    with pytest.raises(ValueError, match="gamma"):
        IntentPPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="episode_length"):
        IntentPPOConfig(batch_size=8, minibatch_size=4, episode_length=3)


TEXTS = ["what is a group homomorphism", "who wrote the federalist papers"]
PRED = ["math", "law"]
GOLD = ["math", "history"]
CONF = [0.9, 0.8]


def test_accuracy_reward_wiring():
    assert score(resolve_reward("accuracy"), TEXTS, PRED, GOLD, CONF) == [1.0, 0.0]


def test_f1_reward_is_the_batch_macro_f1():
    # classes {math, law, history}: math F1 1, law 0, history 0 -> 1/3 for every sample
    got = score(resolve_reward("f1"), TEXTS, PRED, GOLD, CONF)
    assert got == pytest.approx([1 / 3, 1 / 3])


def test_calibration_reward_rewards_confident_right_and_punishes_confident_wrong():
    got = score(resolve_reward("calibration"), TEXTS, PRED, GOLD, CONF)
    assert got == pytest.approx([1 - 2 * 0.1 ** 2, 1 - 2 * 0.8 ** 2])  # Brier: 0.98 and -0.28


def test_custom_callable_and_weighted_list():
    seen = {}

    def fn(prompts, completions, labels, confidences, **kw):
        seen.update(labels=labels, confidences=confidences)
        return [c if p == y else None for p, y, c in zip(completions, labels, confidences)]

    assert score(resolve_reward(fn), TEXTS, PRED, GOLD, CONF) == [0.9, None]
    assert seen == {"labels": GOLD, "confidences": CONF}
    combo = resolve_reward([{"name": "accuracy", "weight": 2.0}, {"name": "calibration", "weight": 1.0}])
    assert score(combo, TEXTS, PRED, GOLD, CONF) == pytest.approx([2.0 + 0.98, 0.0 - 0.28])


def test_unknown_reward_names_the_config_field():
    with pytest.raises(ValueError, match="rl_training.reward_metric"):
        resolve_reward("bleu")
