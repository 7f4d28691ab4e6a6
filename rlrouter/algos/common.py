"""Pieces shared by the GRPO and PPO learners: masked statistics, token log-probs, entropy, KL, the surrogate.

Every token-level tensor here is ``(B, T)`` and *aligned with ``input_ids``*: position ``t`` holds the
quantity for token ``input_ids[:, t]`` (its log-prob, the entropy of the distribution it was sampled
from, its advantage, ...). Position 0 has no prediction and is always 0. The rollout's ``loss_mask``
(1 on policy-generated tokens, 0 on the prompt, the ``<information>`` blocks and padding) uses the
same alignment, so nothing is shifted twice.

Pure torch, no Ray: the learner wraps these in Ray Train.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


# ---------------------------------------------------------------- masked statistics


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1. Masked-out entries may hold inf/NaN: they never reach the sum."""
    x = torch.where(mask.bool(), x, torch.zeros_like(x))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where the 0/1 ``mask`` is 1; 0 (not NaN) where nothing is selected."""
    count = mask.sum() if dim is None else mask.sum(dim)
    # an empty selection (a trajectory with no policy token) gives 0, not 0/0
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the selected entries (Bessel-corrected by default, as ``torch.var``); 0 for < 2 entries."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    n = mask.sum()
    if unbiased:
        var = torch.where(n > 1, var * n / (n - 1).clamp(min=1), torch.zeros_like(var))
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """Normalise the selected entries to unit variance (and zero mean if ``shift_mean``); others become 0."""
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def aggregate_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce a per-token loss ``(B, T)`` to a scalar.

    - ``token-mean``: every policy token of the batch weighs the same (DAPO); long trajectories count more.
    - ``seq-mean-token-mean``: mean over each trajectory's tokens, then over trajectories (the GRPO paper);
      trajectories with no policy token are left out of the outer mean.
    - ``seq-mean-token-sum-norm``: token sums divided by the constant ``B * T`` (Dr. GRPO), so the loss
      carries no length bias.
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    if mode == "seq-mean-token-mean":
        seq_loss = masked_mean(loss_mat, mask, dim=-1)  # (B,)
        has_tokens = (mask.sum(-1) > 0).to(loss_mat.dtype)  # (B,)
        return masked_mean(seq_loss, has_tokens)
    if mode == "seq-mean-token-sum-norm":
        return masked_sum(loss_mat, mask) / float(loss_mat.numel())
    raise ValueError(f"loss_agg_mode: unknown '{mode}', expected one of {LOSS_AGG_MODES}")


# ---------------------------------------------------------------- from logits


LOGITS_CHUNK = 256
"""Positions per chunk of :class:`_ChunkedLogProbs`: its fp32 temporaries are ``B x 256 x V``, whatever the
window (Qwen2.5's vocabulary: 156 MB a row)."""


class _ChunkedLogProbs(torch.autograd.Function):
    """Token log-probs and entropies of ``logits`` (B, W + 1, V) for ``labels`` (B, W), computed and
    differentiated ``chunk`` positions at a time.

    Autograd through ``.float()``, ``logsumexp``, ``gather`` and ``softmax`` keeps an fp32 copy of the
    logits and, in backward, several more fp32 ``(B, W, V)`` temporaries alive together: about 14 bytes an
    element forward and 20 backward, measured (``tests/algos/test_common.py``). Here forward keeps only the
    logits (the model's own output, alive anyway) and the per-position ``logZ``; backward writes each chunk's
    gradient into one tensor of the logits' dtype. Both grow with ``chunk x V``, not ``W x V``, beyond that.
    The values and gradients are those of the plain computation (``token_logprobs_and_entropy``'s formulas).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, temperature: float, chunk: int,
                entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        # logits: (B, W + 1, V), the last position predicting nothing (not sliced off: a slice's backward
        # would allocate a second whole gradient); labels: (B, W)
        B, W = labels.shape
        logp = logits.new_empty((B, W), dtype=torch.float32)
        entropy = logits.new_empty((B, W), dtype=torch.float32)
        logz = logits.new_empty((B, W), dtype=torch.float32)
        for a in range(0, W, chunk):
            x = logits[:, a:min(a + chunk, W)].float() / temperature  # (B, c, V)
            z = torch.logsumexp(x, dim=-1)  # (B, c)
            logz[:, a:a + chunk] = z
            logp[:, a:a + chunk] = x.gather(-1, labels[:, a:a + chunk].unsqueeze(-1)).squeeze(-1) - z
            entropy[:, a:a + chunk] = z - (torch.softmax(x, dim=-1) * x).sum(-1)
            del x
        ctx.save_for_backward(logits, labels, logz, entropy)
        ctx.temperature, ctx.chunk, ctx.entropy_grad = temperature, chunk, entropy_grad
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp: torch.Tensor, g_entropy: torch.Tensor | None):
        logits, labels, logz, entropy = ctx.saved_tensors
        t, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        grad[:, -1] = 0  # the last position predicts no label
        for a in range(0, labels.shape[1], chunk):
            e = min(a + chunk, labels.shape[1])
            x = logits[:, a:e].float() / t  # (B, c, V)
            z = logz[:, a:a + chunk].unsqueeze(-1)
            p = torch.exp(x - z)  # softmax
            g = g_logp[:, a:a + chunk].unsqueeze(-1)
            gx = -p * g  # d logp / dx = onehot(label) - p
            gx.scatter_add_(-1, labels[:, a:a + chunk].unsqueeze(-1), g)
            if ctx.entropy_grad and g_entropy is not None:
                # H = -sum p log p; dH/dx_j = -p_j (log p_j + H), log p_j = x_j - logZ
                h = entropy[:, a:a + chunk].unsqueeze(-1)
                gx -= g_entropy[:, a:a + chunk].unsqueeze(-1) * p * (x - z + h)
            grad[:, a:e] = (gx / t).to(grad.dtype)
            del x, p, gx
        return grad, None, None, None, None


def chunked_logprobs_and_entropy(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0,
                                 entropy_grad: bool = True, chunk: int = LOGITS_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_logprobs_and_entropy`` in chunks of positions (:class:`_ChunkedLogProbs`): the learner's path.
    Same values and gradients; memory beyond the logits no longer grows with window x vocabulary."""
    # logits: (B, T, V), input_ids: (B, T)
    logp, entropy = _ChunkedLogProbs.apply(logits, input_ids[:, 1:], float(temperature), int(chunk),
                                           bool(entropy_grad and torch.is_grad_enabled()))
    return F.pad(logp, (1, 0), value=0.0), F.pad(entropy, (1, 0), value=0.0)  # (B, T), (B, T)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-prob of each token of ``input_ids`` under ``logits``, aligned with ``input_ids`` (position 0 is 0).

    ``logits[:, t]`` predicts ``input_ids[:, t + 1]``. Divide by the sampling ``temperature`` so the
    result matches the log-probs the rollout engine reported for the sampled tokens.
    """
    # logits: (B, T, V), input_ids: (B, T)
    logits = logits[:, :-1].float() / temperature  # (B, T-1, V)
    labels = input_ids[:, 1:]  # (B, T-1)
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    # gather - logsumexp instead of log_softmax: never materialises a second (B, T, V) tensor
    logp = picked - torch.logsumexp(logits, dim=-1)  # (B, T-1)
    return F.pad(logp, (1, 0), value=0.0)  # (B, T)


def token_logprobs_and_entropy(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0,
                               entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_logprobs`` and ``token_entropy`` in one pass: one float copy of the logits, one logsumexp.

    The learner needs both on every minibatch, and the ``(B, T, V)`` logits dominate its memory. With
    ``entropy_grad=False`` (no entropy bonus: the entropy is only a metric) no graph is kept for it.
    """
    # logits: (B, T, V), input_ids: (B, T)
    logits = logits[:, :-1].float() / temperature  # (B, T-1, V)
    logz = torch.logsumexp(logits, dim=-1)  # (B, T-1)
    picked = logits.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    logp = picked - logz  # (B, T-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # (B, T-1)
    return F.pad(logp, (1, 0), value=0.0), F.pad(entropy, (1, 0), value=0.0)  # (B, T), (B, T)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the distribution each token was sampled from, aligned with ``input_ids`` (position 0 is 0)."""
    # logits: (B, T, V)
    logits = logits[:, :-1].float() / temperature  # (B, T-1, V)
    logz = torch.logsumexp(logits, dim=-1)  # (B, T-1)
    probs = torch.softmax(logits, dim=-1)  # (B, T-1, V)
    entropy = logz - (probs * logits).sum(-1)  # H = log Z - E_p[logit], (B, T-1)
    return F.pad(entropy, (1, 0), value=0.0)  # (B, T)


# ---------------------------------------------------------------- KL to the frozen reference


K3_MAX = 10.0
"""Largest per-token k3 value (verl: ``low_var_kl`` clamped to [-10, 10])."""


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy (Schulman, "Approximating KL").

    With ``log_ratio = ref_logp - logp`` (log of r = p_ref / p_policy at the sampled token):
    - ``k1 = -log_ratio``: unbiased, high variance, can be negative;
    - ``k2 = log_ratio**2 / 2``: biased, low variance, >= 0;
    - ``k3 = (r - 1) - log_ratio``: unbiased, low variance, >= 0 (the GRPO paper's choice).

    As a loss term, k1's gradient is zero in expectation: use k3 in the loss, k1 in the reward.
    """
    # logp, ref_logp: (B, T)
    log_ratio = ref_logp - logp  # (B, T)
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        # k3's gradient in logp is 1 - r = 1 - exp(ref_logp - logp): unbounded where the reference finds a
        # sampled token far likelier than the policy does. One such token then outweighs the whole policy
        # gradient (and, after clipping, sets its direction). As verl's low_var_kl, clamp the value to
        # K3_MAX, which zeroes the gradient beyond it; the inner clamp only keeps exp finite.
        log_ratio = log_ratio.clamp(-20.0, 20.0)
        return (torch.expm1(log_ratio) - log_ratio).clamp(max=K3_MAX)
    raise ValueError(f"kl.estimator: unknown '{estimator}', expected one of {KL_ESTIMATORS}")


@dataclass
class KLConfig:
    """How the policy is held near the frozen reference policy (GRPO and PPO alike)."""

    coef: float = 0.0
    """beta. 0 turns the KL off, and the learner can skip the reference forward pass."""
    estimator: str = "k3"
    """k1, k2 or k3 (see ``kl_estimate``)."""
    in_reward: bool = False
    """True: subtract beta * KL from each token's reward (PPO/InstructGPT); False: add it to the loss (GRPO)."""

    def __post_init__(self) -> None:
        if not isinstance(self.coef, (int, float)) or self.coef < 0:
            raise ValueError(f"kl.coef: must be a number >= 0, got {self.coef!r}")
        if self.estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl.estimator: unknown '{self.estimator}', expected one of {KL_ESTIMATORS}")

    @property
    def enabled(self) -> bool:
        return self.coef > 0

    @property
    def in_loss(self) -> bool:
        return self.enabled and not self.in_reward


def sparse_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place each trajectory's scalar reward on its last policy token: ``(B,)`` -> ``(B, T)``.

    The outcome reward is earned by the whole trajectory; the last action token is where it arrives.
    A trajectory with no policy token gets no reward anywhere (there is no action to credit).
    """
    # rewards: (B,), mask: (B, T)
    B, T = mask.shape
    positions = torch.arange(T, device=mask.device).expand(B, T)  # (B, T)
    last = torch.where(mask.bool(), positions, torch.full_like(positions, -1)).amax(-1)  # (B,)
    token_rewards = torch.zeros(B, T, dtype=rewards.dtype, device=rewards.device)
    has_tokens = last >= 0
    rows = torch.arange(B, device=mask.device)[has_tokens]
    token_rewards[rows, last[has_tokens]] = rewards[has_tokens]
    return token_rewards


def kl_penalized_rewards(token_rewards: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                         mask: torch.Tensor, kl: KLConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``r_t - beta * kl_t`` on every policy token (the "KL in the reward" variant); returns (rewards, kl).

    ``logp`` are the rollout-time log-probs (the policy that produced the samples). Nothing here
    carries gradient: the penalty shapes the return, not the loss.
    """
    # token_rewards, logp, ref_logp, mask: (B, T)
    kl_tok = kl_estimate(logp.detach(), ref_logp.detach(), kl.estimator)  # (B, T)
    kl_tok = torch.where(mask.bool(), kl_tok, torch.zeros_like(kl_tok))
    return token_rewards - kl.coef * kl_tok, kl_tok


# ---------------------------------------------------------------- the clipped surrogate


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      clip_eps_low: float = 0.2, clip_eps_high: float = 0.2,
                      loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), negated to be minimised.

    ``ratio = exp(logp - old_logp)``; per token the loss is ``max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high))``.
    Separate low/high bounds allow DAPO's clip-higher. Returns ``pg_loss`` and metrics:
    ``approx_kl`` (k3 of old vs new, as CleanRL) and ``clipfrac`` (share of tokens where the clip binds).
    """
    # logp, old_logp, advantages, mask: (B, T); only logp carries gradient
    old_logp, advantages = old_logp.detach(), advantages.detach()
    log_ratio = logp - old_logp  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    pg_losses = -advantages * ratio  # (B, T)
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)  # (B, T)
    pg_loss = aggregate_loss(torch.maximum(pg_losses, pg_losses_clipped), mask, loss_agg_mode)

    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1) - log_ratio, mask)
        clipfrac = masked_mean((pg_losses_clipped > pg_losses).float(), mask)
        ratio_mean = masked_mean(ratio, mask)
    metrics = {"learner/approx_kl": approx_kl.item(), "learner/clipfrac": clipfrac.item(),
               "learner/ratio_mean": ratio_mean.item()}
    return pg_loss, metrics


def check_clip(clip_eps_low: float, clip_eps_high: float, loss_agg_mode: str, entropy_coef: float) -> None:
    """Shared ``__post_init__`` checks of the GRPO and PPO configs, naming the field."""
    if not 0 < clip_eps_low < 1:
        raise ValueError(f"clip_eps_low: must be in (0, 1), got {clip_eps_low!r}")
    if not clip_eps_high > 0:
        raise ValueError(f"clip_eps_high: must be > 0, got {clip_eps_high!r}")
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode: unknown '{loss_agg_mode}', expected one of {LOSS_AGG_MODES}")
    if entropy_coef < 0:
        raise ValueError(f"entropy_coef: must be >= 0, got {entropy_coef!r}")


def add_kl_and_entropy(loss: torch.Tensor, pg_loss: torch.Tensor, metrics: dict[str, float], logp: torch.Tensor,
                       mask: torch.Tensor, kl: KLConfig, entropy_coef: float, loss_agg_mode: str,
                       ref_logp: torch.Tensor | None = None,
                       entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The tail GRPO and PPO share: ``+ beta * kl`` (when the KL lives in the loss) and
    ``- entropy_coef * entropy``; reports the token means of ``kl`` and ``entropy`` whenever given."""
    # logp (with grad), mask, ref_logp, entropy: (B, T)
    if kl.in_loss and ref_logp is None:
        raise ValueError("kl.coef > 0 with the KL in the loss: ref_logp is required")
    if ref_logp is not None:
        kl_tok = kl_estimate(logp, ref_logp.detach(), kl.estimator)  # (B, T)
        if kl.in_loss:
            loss = loss + kl.coef * aggregate_loss(kl_tok, mask, loss_agg_mode)
        metrics["learner/kl"] = masked_mean(kl_tok.detach(), mask).item()

    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0: entropy is required")
    if entropy is not None:
        if entropy_coef > 0:
            loss = loss - entropy_coef * aggregate_loss(entropy, mask, loss_agg_mode)
        metrics["learner/entropy"] = masked_mean(entropy.detach(), mask).item()

    metrics["learner/pg_loss"] = pg_loss.item()
    metrics["learner/loss"] = loss.item()
    return loss, metrics
