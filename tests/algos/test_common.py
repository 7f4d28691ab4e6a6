"""Masked statistics, log-probs, entropy, KL estimators and the clipped surrogate against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlrouter.algos.common import (
    KLConfig,
    aggregate_loss,
    clipped_surrogate,
    kl_estimate,
    kl_penalized_rewards,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    sparse_rewards,
    token_entropy,
    token_logprobs,
    token_logprobs_and_entropy,
)

T = torch.tensor


def close(a: torch.Tensor | float, b, atol: float = 1e-5) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=atol)


# ---------------------------------------------------------------- masked statistics


def test_masked_mean_and_sum_ignore_masked_entries_even_inf():
    x = T([[1.0, 2.0, float("inf")], [float("nan"), 5.0, 6.0]])
    mask = T([[1, 1, 0], [0, 0, 1]])
    assert close(masked_sum(x, mask), 9.0)  # 1 + 2 + 6
    assert close(masked_mean(x, mask), 3.0)  # 9 / 3
    assert close(masked_mean(x, mask, dim=-1), [1.5, 6.0])


def test_masked_mean_of_empty_selection_is_zero_not_nan():
    x = T([[1.0, 2.0], [3.0, 4.0]])
    mask = T([[0, 0], [1, 0]])
    assert close(masked_mean(x, mask, dim=-1), [0.0, 3.0])
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def test_masked_var_and_whiten():
    x = T([[1.0, 2.0, 100.0], [-7.0, 6.0, 0.0]])
    mask = T([[1, 1, 0], [0, 1, 0]])
    # selected: 1, 2, 6; mean 3; squared deviations 4, 1, 9 -> sum 14
    assert close(masked_var(x, mask, unbiased=False), 14 / 3)
    assert close(masked_var(x, mask), 7.0)
    s7 = math.sqrt(7.0)
    assert close(masked_whiten(x, mask), [[-2 / s7, -1 / s7, 0.0], [0.0, 3 / s7, 0.0]])
    # not shifting keeps the mean: (x - 3) / sqrt(7) + 3
    assert close(masked_whiten(x, mask, shift_mean=False), [[3 - 2 / s7, 3 - 1 / s7, 0.0], [0.0, 3 + 3 / s7, 0.0]])


def test_whiten_of_constant_values_is_zero_not_nan():
    out = masked_whiten(T([[2.0, 2.0, 2.0]]), T([[1, 1, 1]]))
    assert torch.isfinite(out).all() and close(out, [[0.0, 0.0, 0.0]])


def test_aggregate_loss_modes():
    loss = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = T([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert close(aggregate_loss(loss, mask, "token-mean"), 2.5)  # (1 + 2 + 3 + 4) / 4
    # per sequence 2 and 4; the empty third row is left out of the mean
    assert close(aggregate_loss(loss, mask, "seq-mean-token-mean"), 3.0)
    assert close(aggregate_loss(loss, mask, "seq-mean-token-sum-norm"), 10 / 9)  # sum / (B * T)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate_loss(loss, mask, "mean")


# ---------------------------------------------------------------- from logits


def test_token_logprobs_by_hand():
    # position 0 predicts token 1: probs [1/4, 3/4]; position 1 predicts token 2: probs [2/3, 1/3]
    logits = T([[[0.0, math.log(3)], [math.log(2), 0.0], [5.0, -5.0]]])  # (B=1, T=3, V=2)
    input_ids = T([[0, 1, 1]])
    assert close(token_logprobs(logits, input_ids), [[0.0, math.log(3 / 4), math.log(1 / 3)]])
    # temperature 2 halves the logits: p(1) = sqrt(3) / (1 + sqrt(3)) at position 1
    s3 = math.sqrt(3)
    expected_t2 = [[0.0, math.log(s3 / (1 + s3)), math.log(1 / (1 + math.sqrt(2)))]]
    assert close(token_logprobs(logits, input_ids, temperature=2.0), expected_t2)


def test_token_logprobs_match_log_softmax_and_carry_gradient():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, requires_grad=True)
    ids = torch.randint(0, 7, (2, 5), generator=g)
    ref = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out = token_logprobs(logits, ids)
    assert out.shape == (2, 5) and close(out[:, 1:], ref) and (out[:, 0] == 0).all()
    out.sum().backward()
    assert logits.grad is not None and logits.grad[:, :-1].abs().sum() > 0


def test_token_entropy_by_hand():
    logits = T([[[0.0, math.log(3)], [0.0, 0.0], [1.0, 2.0]]])  # probs [1/4, 3/4], then uniform
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.5623
    assert close(token_entropy(logits), [[0.0, h1, math.log(2)]])
    assert close(token_entropy(torch.zeros(1, 2, 4)), [[0.0, math.log(4)]])


def test_one_pass_logprobs_and_entropy_equal_the_separate_ones():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 6, 11, generator=g)
    ids = torch.randint(0, 11, (3, 6), generator=g)
    logp, entropy = token_logprobs_and_entropy(logits, ids, temperature=0.7)
    assert close(logp, token_logprobs(logits, ids, temperature=0.7))
    assert close(entropy, token_entropy(logits, temperature=0.7))
    logits.requires_grad_(True)
    logp, entropy = token_logprobs_and_entropy(logits, ids, entropy_grad=False)
    assert logp.requires_grad and not entropy.requires_grad
    assert token_logprobs_and_entropy(logits, ids)[1].requires_grad


# ---------------------------------------------------------------- KL


def test_kl_estimators_by_hand():
    logp = T([[math.log(0.5), -1.0]])
    ref_logp = T([[math.log(0.25), -1.0]])  # second token: the same under both -> every estimator is 0
    lr = math.log(0.5)  # log(p_ref / p) at the first token
    assert close(kl_estimate(logp, ref_logp, "k1"), [[-lr, 0.0]])  # 0.6931
    assert close(kl_estimate(logp, ref_logp, "k2"), [[0.5 * lr * lr, 0.0]])  # 0.2402
    assert close(kl_estimate(logp, ref_logp, "k3"), [[(0.5 - 1) - lr, 0.0]])  # 0.1931
    with pytest.raises(ValueError, match="kl.estimator"):
        kl_estimate(logp, ref_logp, "k4")


def test_k1_and_k3_are_unbiased_estimators_of_the_true_kl():
    # exact expectation over the policy's support, no sampling: E_q[k] must equal KL(q || p)
    q = T([0.5, 0.3, 0.2])
    p = T([0.2, 0.2, 0.6])
    true_kl = (q * (q / p).log()).sum()
    for est in ("k1", "k3"):
        k = kl_estimate(q.log()[None], p.log()[None], est)[0]
        assert close((q * k).sum(), true_kl), est
    assert (kl_estimate(q.log()[None], p.log()[None], "k3") >= 0).all()


def test_kl_config_validation():
    with pytest.raises(ValueError, match="kl.coef"):
        KLConfig(coef=-0.1)
    with pytest.raises(ValueError, match="kl.estimator"):
        KLConfig(estimator="low_var")
    assert not KLConfig().enabled
    assert KLConfig(coef=0.1).in_loss and not KLConfig(coef=0.1, in_reward=True).in_loss


def test_sparse_rewards_land_on_last_policy_token():
    mask = T([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    out = sparse_rewards(T([1.0, 2.0, 3.0]), mask)
    assert torch.equal(out, T([[0, 0, 0, 0, 1.0, 0], [0, 0, 0, 2.0, 0, 0], [0, 0, 0, 0, 0, 0.0]]))


def test_kl_penalized_rewards_by_hand():
    token_rewards = T([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    logp = T([[0.0, -1.0, -2.0], [-3.0, -1.0, -1.0]])
    ref_logp = T([[0.0, -1.5, -1.0], [0.0, 0.0, 0.0]])
    mask = T([[0, 1, 1], [0, 0, 0]])
    rewards, kl = kl_penalized_rewards(token_rewards, logp, ref_logp, mask, KLConfig(0.1, "k1", in_reward=True))
    assert close(kl, [[0.0, 0.5, -1.0], [0.0, 0.0, 0.0]])  # k1 = logp - ref_logp, on policy tokens only
    assert close(rewards, [[0.0, -0.05, 1.1], [0.0, 0.0, 0.0]])


# ---------------------------------------------------------------- clipped surrogate


def _surrogate_case():
    # five policy tokens covering every clip case, one masked token with an absurd ratio
    ratio = T([[1.5, 0.5, 1.5, 0.5, 1.1, math.exp(50)]])
    adv = T([[1.0, 1.0, -1.0, -1.0, 2.0, 1.0]])
    mask = T([[1, 1, 1, 1, 1, 0]])
    logp = ratio.log().clone().requires_grad_(True)
    return logp, torch.zeros_like(logp), adv, mask


def test_clipped_surrogate_by_hand():
    logp, old_logp, adv, mask = _surrogate_case()
    pg_loss, metrics = clipped_surrogate(logp, old_logp, adv, mask, 0.2, 0.2)
    # per token max(-A r, -A clip(r, 0.8, 1.2)):
    #   A=+1 r=1.5 -> max(-1.5, -1.2) = -1.2  (clip binds)
    #   A=+1 r=0.5 -> max(-0.5, -0.8) = -0.5
    #   A=-1 r=1.5 -> max( 1.5,  1.2) =  1.5
    #   A=-1 r=0.5 -> max( 0.5,  0.8) =  0.8  (clip binds)
    #   A=+2 r=1.1 -> -2.2                     (inside the range)
    assert close(pg_loss, (-1.2 - 0.5 + 1.5 + 0.8 - 2.2) / 5)  # -0.32
    assert close(metrics["learner/clipfrac"], 2 / 5)
    k3 = lambda r: (r - 1) - math.log(r)  # noqa: E731
    assert close(metrics["learner/approx_kl"], (2 * k3(1.5) + 2 * k3(0.5) + k3(1.1)) / 5)  # 0.11601
    assert close(metrics["learner/ratio_mean"], (1.5 + 0.5 + 1.5 + 0.5 + 1.1) / 5)
    # d loss / d logp = -A r / 5 where the unclipped branch is taken, 0 where the clip binds or masked
    pg_loss.backward()
    assert close(logp.grad, [[0.0, -0.5 / 5, 1.5 / 5, 0.0, -2.2 / 5, 0.0]])


def test_clip_higher_releases_the_upper_bound():
    logp, old_logp, adv, mask = _surrogate_case()
    pg_loss, metrics = clipped_surrogate(logp, old_logp, adv, mask, clip_eps_low=0.2, clip_eps_high=0.6)
    # only the A=-1, r=0.5 token is still clipped; A=+1, r=1.5 now keeps -1.5
    assert close(pg_loss, (-1.5 - 0.5 + 1.5 + 0.8 - 2.2) / 5)
    assert close(metrics["learner/clipfrac"], 1 / 5)


def test_surrogate_sends_gradient_through_logp_only():
    logp, _, adv, mask = _surrogate_case()
    old_logp = torch.zeros_like(logp, requires_grad=True)  # e.g. recomputed by the learner without no_grad
    adv = adv.clone().requires_grad_(True)
    clipped_surrogate(logp, old_logp, adv, mask)[0].backward()
    assert logp.grad is not None and old_logp.grad is None and adv.grad is None


def test_surrogate_at_ratio_one_is_minus_mean_advantage():
    adv = T([[0.0, 0.3, -0.7, 2.0]])
    mask = T([[0, 1, 1, 1]])
    logp = torch.full((1, 4), -1.3)
    pg_loss, metrics = clipped_surrogate(logp, logp.clone(), adv, mask)
    assert close(pg_loss, -(0.3 - 0.7 + 2.0) / 3)
    assert metrics["learner/clipfrac"] == 0.0 and close(metrics["learner/approx_kl"], 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("entropy_grad", [True, False])
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_chunked_logprobs_equal_the_plain_computation_values_and_gradients(dtype, entropy_grad, chunk):
    """The learner's chunked pass (memory bounded by one chunk) against autograd through the plain formulas:
    the same log-probs and entropies, the same gradient, chunk sizes that do and do not divide the window."""
    from rlrouter.algos.common import chunked_logprobs_and_entropy, token_logprobs_and_entropy

    torch.manual_seed(0)
    logits = torch.randn(3, 37, 101, dtype=dtype) * 3
    ids = torch.randint(0, 101, (3, 37))
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    lp1, e1 = token_logprobs_and_entropy(a, ids, 0.7, entropy_grad=entropy_grad)
    lp2, e2 = chunked_logprobs_and_entropy(b, ids, 0.7, entropy_grad=entropy_grad, chunk=chunk)
    assert torch.equal(lp1, lp2) and torch.equal(e1, e2)
    w1, w2 = torch.randn_like(lp1), torch.randn_like(e1)
    ((lp1 * w1).sum() + ((e1 * w2).sum() if entropy_grad else 0)).backward()
    ((lp2 * w1).sum() + ((e2 * w2).sum() if entropy_grad else 0)).backward()
    assert b.grad.dtype == dtype
    torch.testing.assert_close(b.grad.float(), a.grad.float(), atol=2e-5 if dtype == torch.float32 else 1e-2, rtol=0)
    assert not b.grad[:, -1].any()  # the last position predicts nothing
