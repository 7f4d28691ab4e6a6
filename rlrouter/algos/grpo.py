"""GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): group-normalised advantages, no critic.

The rollout samples ``G = group_size`` trajectories per prompt; each trajectory's advantage is its
reward measured against the other trajectories of the same prompt, and every policy token of the
trajectory gets that advantage. The loss is PPO's clipped surrogate plus a KL term to the frozen
reference (or the KL in the reward) and an entropy bonus.

Reads top to bottom: config -> advantages -> loss. Registered as ``algo: grpo`` with the advantage
estimator ``grpo`` and the policy loss ``grpo`` (``rlrouter.algos.registry``); the learner
(``rlrouter.learner``) calls the estimator once per rollout batch and the loss once per minibatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from rlrouter.algos.common import (
    KLConfig,
    add_kl_and_entropy,
    check_clip,
    clipped_surrogate,
    kl_penalized_rewards,
    sparse_rewards,
)
from rlrouter.algos.registry import register_adv_est, register_algo, register_policy_loss


BASELINES: tuple[str, ...] = ("group", "well_formed")


@register_algo("grpo")
@dataclass
class GRPOConfig:
    """GRPO's knobs. Defaults follow the GRPO paper with verl's clip range."""

    group_size: int = 4
    """G: trajectories sampled per prompt; the baseline is the group's mean reward."""
    scale_by_std: bool = False
    """Divide by the group's std (GRPO's paper). False (the default) is Dr. GRPO (arXiv 2503.20783): the
    advantage is the reward minus the group's mean. Logged (replay) rewards are fixed per (question,
    candidate): with the division, a group whose two samples differ by a 0.04 cost gap gets the same
    advantage as one that differs by a 0.9 right/wrong gap, and the policy learns how often a candidate
    beats its group-mates, not its mean reward (the trap of ``benchmarks/bench_rl_bandit.py``)."""
    baseline: str = "group"
    """Each group's baseline: ``group``, the mean reward of all its samples (GRPO's); ``well_formed``, the mean
    of the samples that passed the format check (all of them when none did). With ``well_formed`` a format
    failure's penalty is the failing sample's own advantage, not a bonus shared by every well-formed sample of
    its group: on RouterBench's logged pool that bonus went to whichever candidate each task's groups were
    already calling, and with 88% of the training prompts on two tasks it lifted their candidate everywhere
    (docs/router_r1.md, "At scale on RouterBench"). Estimator ``grpo`` only."""
    eps: float = 1e-6
    """Added to the group std so a group with equal rewards yields 0, not 0/0."""
    clip_eps_low: float = 0.2
    """Lower clip of the ratio: 1 - clip_eps_low."""
    clip_eps_high: float = 0.2
    """Upper clip of the ratio: 1 + clip_eps_high (DAPO's clip-higher uses 0.28)."""
    loss_agg_mode: str = "token-mean"
    """How per-token losses become a scalar (see ``common.aggregate_loss``)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    kl: KLConfig = field(default_factory=KLConfig)
    """KL to the frozen reference: as a loss term or in the reward."""
    adv_estimator: str = "grpo"
    """The registered advantage estimator (``rlrouter.algos.registry``): ``grpo`` (group mean baseline,
    with ``scale_by_std`` the group's std), ``rloo`` (leave-one-out mean of the other samples) or
    ``batch_std`` (group mean baseline, divided by the std of the whole batch's rewards: one scale for every
    group, so the groups keep their relative weights)."""
    policy_loss: str = "grpo"
    """The registered policy loss."""

    def __post_init__(self) -> None:
        if isinstance(self.kl, Mapping):  # a Hydra / YAML dict
            self.kl = KLConfig(**self.kl)
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(f"group_size: GRPO needs >= 2 samples per prompt, got {self.group_size!r}")
        if self.eps <= 0:
            raise ValueError(f"eps: must be > 0, got {self.eps!r}")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline: one of {BASELINES}, got {self.baseline!r}")
        if self.baseline == "well_formed" and self.adv_estimator != "grpo":
            raise ValueError(f"baseline=well_formed: supported by adv_estimator grpo, not {self.adv_estimator!r}")
        check_clip(self.clip_eps_low, self.clip_eps_high, self.loss_agg_mode, self.entropy_coef)


# ---------------------------------------------------------------- advantages


def grpo_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True,
                    eps: float = 1e-6, well_formed: torch.Tensor | None = None) -> torch.Tensor:
    """``(r - mean_group) / (std_group + eps)`` per trajectory; groups are contiguous runs of ``group_size``.

    The rollout lays out sample ``j`` of prompt ``i`` at row ``i * G + j``. The std is Bessel-corrected,
    as in TRL and verl. A group whose rewards are all equal carries no signal: its advantages are 0.
    ``well_formed`` (B,) bool: the baseline is the mean over a group's well-formed samples (all of them when
    none is); the std stays the whole group's.
    """
    # rewards: (B,) with B = P * G
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards: expected shape (P * {group_size},), got {tuple(rewards.shape)}")
    grouped = rewards.float().reshape(-1, group_size)  # (P, G)
    baseline = grouped.mean(-1, keepdim=True)  # (P, 1)
    if well_formed is not None:
        formed = well_formed.reshape(-1, group_size).to(grouped.dtype)  # (P, G)
        count = formed.sum(-1, keepdim=True)  # (P, 1)
        formed_mean = (grouped * formed).sum(-1, keepdim=True) / count.clamp(min=1)  # (P, 1)
        baseline = torch.where(count > 0, formed_mean, baseline)
    advantages = grouped - baseline  # (P, G)
    if scale_by_std:
        advantages = advantages / (grouped.std(-1, keepdim=True) + eps)  # (P, G)
    return advantages.reshape(-1)  # (B,)


def compute_grpo_advantages(rewards: torch.Tensor, mask: torch.Tensor, cfg: GRPOConfig,
                            old_logp: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None,
                            well_formed: torch.Tensor | None = None) -> torch.Tensor:
    """Token-level advantages ``(B, T)``: each trajectory's group advantage on its policy tokens, 0 elsewhere.

    With ``cfg.kl.in_reward`` the trajectory's reward is first reduced by ``beta * sum_t kl_t`` (its
    rollout-time ``old_logp`` against ``ref_logp``), so the group comparison sees the penalty.
    """
    # rewards: (B,), mask: (B, T)
    if cfg.kl.enabled and cfg.kl.in_reward:
        if old_logp is None or ref_logp is None:
            raise ValueError("kl.in_reward: old_logp and ref_logp are required")
        token_rewards, _ = kl_penalized_rewards(sparse_rewards(rewards.float(), mask), old_logp, ref_logp,
                                                mask, cfg.kl)  # (B, T)
        rewards = token_rewards.sum(-1)  # (B,)
    if cfg.baseline == "well_formed" and well_formed is None:
        raise ValueError("learner.grpo.baseline=well_formed: the learner was not told which samples are well-formed")
    advantages = grpo_advantages(rewards, cfg.group_size, cfg.scale_by_std, cfg.eps,
                                 well_formed if cfg.baseline == "well_formed" else None)  # (B,)
    return _token_advantages(advantages, mask)  # (B, T)


@register_adv_est("grpo")
def grpo_adv_estimator(rewards: torch.Tensor, mask: torch.Tensor, cfg: GRPOConfig, *,
                       values: torch.Tensor | None = None, old_logp: torch.Tensor | None = None,
                       ref_logp: torch.Tensor | None = None,
                       well_formed: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """``compute_grpo_advantages`` in the registry's form: no critic, so no ``values`` and no returns."""
    return compute_grpo_advantages(rewards, mask, cfg, old_logp, ref_logp, well_formed), None


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740): each sample's reward minus the mean of the group's
    *other* samples, ``G / (G - 1) * (r - mean_group)``: an unbiased baseline, since it does not hold the
    sample's own reward."""
    # rewards: (B,) with B = P * G
    centred = grpo_advantages(rewards, group_size, scale_by_std=False)  # (B,)
    return centred * (group_size / (group_size - 1))


def batch_std_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """The group mean baseline divided by the std of every reward of the batch (one scale for all groups,
    as REINFORCE++ and Dr. GRPO's batch normalisation do): the step's size no longer depends on the reward
    scale, and a small gap still counts less than a large one."""
    # rewards: (B,) with B = P * G
    centred = grpo_advantages(rewards, group_size, scale_by_std=False)  # (B,)
    return centred / (rewards.float().std() + eps) if rewards.numel() > 1 else centred


def _token_advantages(per_traj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # per_traj: (B,), mask: (B, T) -> (B, T)
    return per_traj.unsqueeze(-1) * mask.to(per_traj.dtype)


def _kl_free_rewards(rewards: torch.Tensor, cfg: GRPOConfig, estimator: str) -> torch.Tensor:
    if cfg.kl.enabled and cfg.kl.in_reward:
        raise ValueError(f"learner.grpo.adv_estimator={estimator}: kl.in_reward is supported by 'grpo' only; "
                         "put the KL in the loss (kl.in_reward=false)")
    return rewards


@register_adv_est("rloo")
def rloo_adv_estimator(rewards: torch.Tensor, mask: torch.Tensor, cfg: GRPOConfig, *,
                       values: torch.Tensor | None = None, old_logp: torch.Tensor | None = None,
                       ref_logp: torch.Tensor | None = None,
                       well_formed: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """``rloo_advantages`` on every policy token of each trajectory."""
    rewards = _kl_free_rewards(rewards, cfg, "rloo")
    return _token_advantages(rloo_advantages(rewards, cfg.group_size), mask), None


@register_adv_est("batch_std")
def batch_std_adv_estimator(rewards: torch.Tensor, mask: torch.Tensor, cfg: GRPOConfig, *,
                            values: torch.Tensor | None = None, old_logp: torch.Tensor | None = None,
                            ref_logp: torch.Tensor | None = None,
                            well_formed: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """``batch_std_advantages`` on every policy token of each trajectory."""
    rewards = _kl_free_rewards(rewards, cfg, "batch_std")
    return _token_advantages(batch_std_advantages(rewards, cfg.group_size, cfg.eps), mask), None


# ---------------------------------------------------------------- loss


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              cfg: GRPOConfig, ref_logp: torch.Tensor | None = None,
              entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's loss on one minibatch; returns ``(loss, metrics)``.

    ``loss = pg_loss + beta * kl - entropy_coef * entropy`` where the KL term is present only when the
    KL lives in the loss. Metrics report the token means of ``kl`` and ``entropy`` whenever they are given.
    """
    # logp (with grad), old_logp, advantages, mask, ref_logp, entropy: (B, T)
    pg_loss, metrics = clipped_surrogate(logp, old_logp, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high,
                                         cfg.loss_agg_mode)
    loss = pg_loss

    return add_kl_and_entropy(loss, pg_loss, metrics, logp, mask, cfg.kl, cfg.entropy_coef, cfg.loss_agg_mode,
                              ref_logp=ref_logp, entropy=entropy)


@register_policy_loss("grpo")
def grpo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     cfg: GRPOConfig, *, values: torch.Tensor | None = None,
                     old_values: torch.Tensor | None = None, returns: torch.Tensor | None = None,
                     ref_logp: torch.Tensor | None = None,
                     entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """``grpo_loss`` in the registry's form: the critic's arguments are not used."""
    return grpo_loss(logp, old_logp, advantages, mask, cfg, ref_logp=ref_logp, entropy=entropy)
