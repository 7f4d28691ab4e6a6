"""PPO with a critic (Schulman et al. 2017), as Router-R1 trains it (arXiv 2506.09033, verl's GAE setup).

One trajectory is one episode. Its actions are the policy-generated tokens only: the prompt and the
``<information>`` blocks the pool returns are observations, so GAE skips them, and the value at the
last action token before an ``<information>`` block bootstraps from the value at the first action
token after it. The outcome reward arrives at the last policy token (optionally with ``-beta * kl`` on
every policy token).

Reads top to bottom: config -> critic head -> GAE -> advantages -> value loss -> loss. Registered as
``algo: ppo`` with the advantage estimator ``gae`` (which needs the critic) and the policy loss ``ppo``
(``rlrouter.algos.registry``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rlrouter.algos.common import (
    KLConfig,
    add_kl_and_entropy,
    aggregate_loss,
    check_clip,
    clipped_surrogate,
    kl_penalized_rewards,
    masked_mean,
    masked_var,
    masked_whiten,
    sparse_rewards,
)
from rlrouter.algos.registry import register_adv_est, register_algo, register_policy_loss


def _ppo_kl_default() -> KLConfig:
    # PPO/InstructGPT put the KL in the reward with the plain k1 estimator; Router-R1's config sets beta
    return KLConfig(coef=0.0, estimator="k1", in_reward=True)


@register_algo("ppo")
@dataclass
class PPOConfig:
    """PPO's knobs. Defaults are Router-R1's (verl): gamma = lambda = 1, value clip 0.5."""

    gamma: float = 1.0
    """Discount per policy token. 1: a short episode with one outcome reward needs no discount."""
    lam: float = 1.0
    """GAE lambda: 1 is the Monte-Carlo return minus the value, 0 is one-step TD."""
    whiten_advantages: bool = True
    """Normalise advantages over the batch's policy tokens (zero mean, unit variance)."""
    clip_eps_low: float = 0.2
    """Lower clip of the ratio: 1 - clip_eps_low."""
    clip_eps_high: float = 0.2
    """Upper clip of the ratio: 1 + clip_eps_high."""
    value_clip: float = 0.5
    """The new value may move at most this far from the rollout-time value before the clipped loss binds."""
    vf_coef: float = 1.0
    """Weight of the value loss. Router-R1's critic is a separate model with its own lr, so 1."""
    loss_agg_mode: str = "token-mean"
    """How per-token losses become a scalar (see ``common.aggregate_loss``)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    kl: KLConfig = field(default_factory=_ppo_kl_default)
    """KL to the frozen reference: in the reward (default for PPO) or as a loss term."""
    adv_estimator: str = "gae"
    """The registered advantage estimator (``rlrouter.algos.registry``)."""
    policy_loss: str = "ppo"
    """The registered policy loss."""

    def __post_init__(self) -> None:
        if isinstance(self.kl, Mapping):  # a Hydra / YAML dict
            self.kl = KLConfig(**self.kl)
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma: must be in [0, 1], got {self.gamma!r}")
        if not 0 <= self.lam <= 1:
            raise ValueError(f"lam: must be in [0, 1], got {self.lam!r}")
        if self.value_clip <= 0:
            raise ValueError(f"value_clip: must be > 0, got {self.value_clip!r}")
        if self.vf_coef < 0:
            raise ValueError(f"vf_coef: must be >= 0, got {self.vf_coef!r}")
        check_clip(self.clip_eps_low, self.clip_eps_high, self.loss_agg_mode, self.entropy_coef)


# ---------------------------------------------------------------- the critic


class ValueHead(nn.Module):
    """The critic's head: a linear map from the backbone's last hidden states to one value per token.

    ``forward`` returns values aligned with ``input_ids`` like the log-probs: ``values[:, t]`` is the
    value of the state in which token ``t`` is chosen, read from ``hidden_states[:, t - 1]``; position 0 is 0.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        if hidden_size <= 0:
            raise ValueError(f"hidden_size: must be > 0, got {hidden_size!r}")
        self.proj = nn.Linear(hidden_size, 1)
        # small initial values keep the first value loss near the reward scale (OpenRLHF's init)
        nn.init.normal_(self.proj.weight, std=1.0 / (hidden_size + 1))
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # hidden_states: (B, T, H), in the backbone's dtype; the head runs in float32
        v = self.proj(hidden_states.to(self.proj.weight.dtype)).squeeze(-1)  # (B, T): value after token t
        return F.pad(v[:, :-1], (1, 0), value=0.0)  # (B, T): value before token t


# ---------------------------------------------------------------- advantages


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over policy tokens only; returns ``(advantages, returns)``, 0 off-mask.

    Walking backwards, a policy token ``t`` whose next policy token is ``t'`` (skipping observation
    tokens) gets ``delta_t = r_t + gamma * V(t') - V(t)`` and ``A_t = delta_t + gamma * lam * A_t'``;
    after the last policy token the episode ends, so ``V = 0`` there. ``returns = A + V``.
    """
    # token_rewards, values, mask: (B, T)
    m = mask.bool()
    if bool((token_rewards.ne(0) & ~m).any()):
        raise ValueError("token_rewards: non-zero reward on a token the policy did not generate")
    B, T = token_rewards.shape
    rewards = token_rewards.float()
    values = values.detach().float()
    advantages = torch.zeros(B, T, dtype=torch.float32, device=rewards.device)
    next_value = torch.zeros(B, dtype=torch.float32, device=rewards.device)  # V at the next policy token
    next_adv = torch.zeros(B, dtype=torch.float32, device=rewards.device)  # A at the next policy token
    # only the columns between the first and the last policy token of the batch can change anything
    active = m.any(0).nonzero().flatten()  # (n,)
    first, last = (int(active[0]), int(active[-1])) if active.numel() else (0, -1)
    for t in range(last, first - 1, -1):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        adv_t = delta + gamma * lam * next_adv  # (B,)
        # observation tokens are transparent: the carried state passes through them unchanged
        advantages[:, t] = torch.where(m[:, t], adv_t, 0.0)
        next_adv = torch.where(m[:, t], adv_t, next_adv)
        next_value = torch.where(m[:, t], values[:, t], next_value)
    returns = torch.where(m, advantages + values, 0.0)  # (B, T)
    return advantages, returns


def compute_ppo_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, cfg: PPOConfig,
                           old_logp: torch.Tensor | None = None,
                           ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """From trajectory rewards ``(B,)`` and rollout-time values ``(B, T)`` to ``(advantages, returns)``, both (B, T).

    The reward sits on the last policy token; with ``cfg.kl.in_reward`` every policy token also pays
    ``beta * kl_t`` (rollout-time ``old_logp`` against ``ref_logp``). Returns are taken before whitening,
    so the critic regresses on the real return.
    """
    # rewards: (B,), values, mask, old_logp, ref_logp: (B, T)
    token_rewards = sparse_rewards(rewards.float(), mask)  # (B, T)
    if cfg.kl.enabled and cfg.kl.in_reward:
        if old_logp is None or ref_logp is None:
            raise ValueError("kl.in_reward: old_logp and ref_logp are required")
        token_rewards, _ = kl_penalized_rewards(token_rewards, old_logp, ref_logp, mask, cfg.kl)  # (B, T)
    advantages, returns = gae(token_rewards, values, mask, cfg.gamma, cfg.lam)  # (B, T), (B, T)
    if cfg.whiten_advantages:
        advantages = masked_whiten(advantages, mask)
    return advantages, returns


@register_adv_est("gae", critic=True)
def gae_adv_estimator(rewards: torch.Tensor, mask: torch.Tensor, cfg: PPOConfig, *,
                      values: torch.Tensor | None = None, old_logp: torch.Tensor | None = None,
                      ref_logp: torch.Tensor | None = None,
                      well_formed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``compute_ppo_advantages`` in the registry's form; ``values`` (the critic's, rollout-time) are required."""
    if values is None:
        raise ValueError("adv_estimator 'gae': needs the critic's values (the learner builds a value head)")
    return compute_ppo_advantages(rewards, values, mask, cfg, old_logp, ref_logp)


# ---------------------------------------------------------------- losses


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               value_clip: float = 0.5, loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss: ``0.5 * max((V - R)^2, (V_clip - R)^2)``, ``V_clip = V_old + clip(V - V_old, +-c)``.

    Taking the max makes the clip pessimistic, as the policy surrogate: a value that jumps far from
    its rollout-time estimate gets no credit for moving toward the return.
    """
    # values (with grad), old_values, returns, mask: (B, T)
    old_values, returns = old_values.detach(), returns.detach()
    values_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)  # (B, T)
    vf_losses = (values - returns) ** 2  # (B, T)
    vf_losses_clipped = (values_clipped - returns) ** 2  # (B, T)
    loss = 0.5 * aggregate_loss(torch.maximum(vf_losses, vf_losses_clipped), mask, loss_agg_mode)

    with torch.no_grad():
        vf_clipfrac = masked_mean((vf_losses_clipped > vf_losses).float(), mask)
        var_returns = masked_var(returns, mask)
        explained_var = 1 - masked_var(returns - values, mask) / var_returns.clamp(min=1e-8)
    metrics = {"learner/value_loss": loss.item(), "learner/vf_clipfrac": vf_clipfrac.item(),
               "learner/vf_explained_var": explained_var.item(),
               "learner/values_mean": masked_mean(values.detach(), mask).item(),
               "learner/returns_mean": masked_mean(returns, mask).item()}
    return loss, metrics


def ppo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
             old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, cfg: PPOConfig,
             ref_logp: torch.Tensor | None = None,
             entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's loss on one minibatch; returns ``(loss, metrics)``.

    ``loss = pg_loss + vf_coef * value_loss + beta * kl - entropy_coef * entropy``, the KL term only
    when the KL lives in the loss. Policy and critic parameters are disjoint, so one backward of the sum
    gives each optimizer its own gradient.
    """
    # logp, values (with grad), old_logp, advantages, old_values, returns, mask, ref_logp, entropy: (B, T)
    pg_loss, metrics = clipped_surrogate(logp, old_logp, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high,
                                         cfg.loss_agg_mode)
    vf_loss, vf_metrics = value_loss(values, old_values, returns, mask, cfg.value_clip, cfg.loss_agg_mode)
    metrics.update(vf_metrics)
    loss = pg_loss + cfg.vf_coef * vf_loss

    return add_kl_and_entropy(loss, pg_loss, metrics, logp, mask, cfg.kl, cfg.entropy_coef, cfg.loss_agg_mode,
                              ref_logp=ref_logp, entropy=entropy)


@register_policy_loss("ppo")
def ppo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    cfg: PPOConfig, *, values: torch.Tensor | None = None,
                    old_values: torch.Tensor | None = None, returns: torch.Tensor | None = None,
                    ref_logp: torch.Tensor | None = None,
                    entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """``ppo_loss`` in the registry's form; the critic's ``values``, ``old_values`` and ``returns`` are required."""
    if values is None or old_values is None or returns is None:
        raise ValueError("policy_loss 'ppo': needs values, old_values and returns (a critic)")
    return ppo_loss(logp, old_logp, advantages, values, old_values, returns, mask, cfg, ref_logp=ref_logp,
                    entropy=entropy)
