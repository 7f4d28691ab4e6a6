"""Learner: one rank of the policy update (GRPO, PPO or any registered algorithm) on collated trajectories.

``LearnerGroup`` (``rlrouter.learner.group``) runs one Learner per Ray Train worker; on one process it
runs as is (tests, debugging). A Learner composes two parts:

- ``LearnerModel`` (``rlrouter.learner.model``): the policy, critic and KL reference, built and wrapped
  (DDP, FSDP2, LoRA), their forward passes, and the weights out (sync, checkpoints) and back in;
- ``UpdateStep`` (``rlrouter.learner.update``): the advantages and the policy loss (looked up by name in
  ``rlrouter.algos.registry``), AdamW, the learning-rate warm-up and the step counters.

The Learner itself only builds them and is the one object the group, the checkpoints and the weight
sync hold per rank.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

import torch

from rlrouter.learner.config import LearnerConfig
from rlrouter.learner.model import LearnerModel
from rlrouter.learner.update import UpdateStep
from rlrouter.rollout.parsing import TrajectoryTokens


def _part(part: str, name: str, writable: bool = False) -> property:
    """A Learner attribute that is ``self.<part>.<name>``."""
    def get(self: Learner) -> Any:
        return getattr(getattr(self, part), name)

    def set_(self: Learner, value: Any) -> None:
        setattr(getattr(self, part), name, value)

    return property(get, set_ if writable else None, doc=f"``{part}.{name}``")


class Learner:
    """One learner rank: the model part and the update step, built from one ``LearnerConfig``."""

    def __init__(self, cfg: LearnerConfig, rank: int = 0, world_size: int = 1, device: str | torch.device = "cpu"):
        self.cfg = cfg
        self.algo = cfg.algo_cfg
        self.model = LearnerModel(cfg, self.algo, rank, world_size, device)
        self.update = UpdateStep(cfg, self.algo, self.model)

    # the model part: what this rank trains, where, and its weights in and out
    rank = _part("model", "rank")
    world_size = _part("model", "world_size")
    device = _part("model", "device")
    fsdp = _part("model", "fsdp")
    tokenizer = _part("model", "tokenizer")
    policy = _part("model", "policy")
    value_head = _part("model", "value_head")
    ref_model = _part("model", "ref_model")
    ref_adapter = _part("model", "ref_adapter")
    module = _part("model", "module")
    # the forward passes, which tests/learner check against a plain forward of the policy
    _forward = _part("model", "forward")
    _reference_logprobs = _part("model", "reference_logprobs")
    set_reference_to_current = _part("model", "set_reference_to_current")
    trainable_state = _part("model", "trainable_state")
    load_trainable_state = _part("model", "load_trainable_state")
    reference_state = _part("model", "reference_state")
    load_reference_state = _part("model", "load_reference_state")
    local_tensors = _part("model", "local_tensors")
    restore_local = _part("model", "restore_local")
    save_adapter = _part("model", "save_adapter")
    save_model = _part("model", "save_model")
    merged_weights = _part("model", "merged_weights")

    # the update step: the optimizer and the step counters (a checkpoint restores both counters)
    optimizer = _part("update", "optimizer")
    version = _part("update", "version", writable=True)
    rl_updates = _part("update", "rl_updates", writable=True)
    optimizer_state = _part("update", "optimizer_state")
    load_optimizer_state = _part("update", "load_optimizer_state")
    reset_moments = _part("update", "reset_moments")

    def train_step(self, trajectories: Sequence[TrajectoryTokens], rewards: Sequence[float],
                   pad_to: int | None = None, well_formed: Sequence[bool] | None = None) -> dict[str, float]:
        """One policy update on this rank's trajectories (item-major groups for GRPO); ``well_formed``: which
        passed the format check (the group baselines of ``learner.grpo.baseline: well_formed``)."""
        return self.update.train_step(trajectories, rewards, pad_to=pad_to, well_formed=well_formed)

    def sft_step(self, trajectories: Sequence[TrajectoryTokens], lr: float | None = None) -> dict[str, float]:
        """One supervised step (cold start) on demonstrations."""
        return self.update.sft_step(trajectories, lr=lr)

    _micro_batches = UpdateStep.micro_batches  # reads only ``cfg`` and ``algo``, which a Learner holds too

    def state_for_checkpoint(self) -> dict[str, Any]:
        """This rank's optimizer state, the policy version and the learner config, for a checkpoint."""
        return {"optimizer": self.optimizer_state(), "version": self.version, "config": asdict(self.cfg)}
