"""The update step of a learner rank: advantages, the policy loss, AdamW and the learning-rate warm-up.

``UpdateStep`` owns the optimizer and the step counters. It asks the model part
(``rlrouter.learner.model``) for forward passes and looks the algorithm up by name
(``rlrouter.algos.registry``): the advantage estimator and the policy loss that the configured
algorithm names. It never asks which algorithm it runs.

AdamW's state is fp32 beside the fp32 master weights: pure-bf16 AdamW would round away updates below
2^-8 of a weight, i.e. every update at Router-R1's lr of 1e-6.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any, Sequence

import torch

from rlrouter.algos.registry import get_adv_estimator, get_policy_loss
from rlrouter.learner import fsdp
from rlrouter.learner.config import LearnerConfig
from rlrouter.learner.model import LearnerModel
from rlrouter.rollout.parsing import TrajectoryTokens, collate


class UpdateStep:
    """One rank's policy (and critic) update: the RL step, the cold start's supervised step, the optimizer."""

    def __init__(self, cfg: LearnerConfig, algo: Any, model: LearnerModel):
        self.cfg, self.algo, self.model = cfg, algo, model
        self.adv_estimator = get_adv_estimator(algo.adv_estimator)
        self.policy_loss = get_policy_loss(algo.policy_loss)
        # built after wrapping: under FSDP the optimizer must hold the sharded parameters (DTensors)
        self.optimizer = torch.optim.AdamW(model.trainable_parameters(), weight_decay=cfg.weight_decay)
        self.version = 0  # optimizer steps taken (cold start and RL): the policy version the rollout serves
        self.rl_updates = 0  # RL train_steps taken (the lr warm-up's clock; checkpointed)
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        if model.fsdp:
            # Weights leave the learner on rank 0 only (sync, checkpoints), but gathering shards is
            # collective: every rank gathers right after each optimizer step, which all ranks take.
            self.optimizer.register_step_post_hook(lambda *_: model.gather_full_state())

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """``batch`` in chunks of ``micro_batch_size`` that keep GRPO's groups whole (``micro_batches``)."""
        return micro_batches(batch, self.cfg.micro_batch_size, getattr(self.algo, "group_size", 1))

    # -- the update -------------------------------------------------------------------------------
    def train_step(self, trajectories: Sequence[TrajectoryTokens], rewards: Sequence[float],
                   pad_to: int | None = None, well_formed: Sequence[bool] | None = None) -> dict[str, float]:
        """One policy update on this rank's trajectories (item-major groups for GRPO)."""
        t0 = time.perf_counter()
        model = self.model
        batch = collate(trajectories, model.tokenizer.pad_token_id, pad_to=pad_to)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        batch["loss_mask"] = batch["loss_mask"].float()
        rewards_t = torch.tensor(list(rewards), dtype=torch.float32, device=model.device)  # (B,)
        formed_t = (torch.tensor(list(well_formed), dtype=torch.bool, device=model.device)  # (B,)
                    if well_formed is not None else None)
        mbs = self.micro_batches(batch)
        # old log-probs are recomputed here (verl does the same): vLLM's sampled log-probs are raw and
        # differ slightly from the learner's numerics, so the first ratio would not be exactly 1
        # No critic, one update epoch and no KL in the reward (GRPO's default): every micro-batch's forward
        # runs before the single optimizer step, so old log-probs equal the new ones; reuse them (detached)
        # instead of a separate pass over the batch (a third of the learner's compute).
        reuse_old = model.value_head is None and self.cfg.update_epochs == 1 and not self.algo.kl.in_reward
        model.module.eval()
        with torch.no_grad():
            ref_logp = torch.cat([model.reference_logprobs(mb) for mb in mbs]) if model.kl_needed else None
            if reuse_old:
                old_logp, old_values = None, None
            else:  # (the shared template once here too: no gradient, so nothing goes back through it)
                template = model.shared_template(batch) if len(mbs) > 1 else None
                old = [model.forward(model.module, mb, model.value_head is not None, with_entropy=False,
                                     template=template) for mb in mbs]
                old_logp = torch.cat([o[0] for o in old])  # (B, T)
                old_values = torch.cat([o[2] for o in old]) if model.value_head is not None else None
        mask = batch["loss_mask"]
        self._warm_up_lr()
        advantages, returns = self.adv_estimator(rewards_t, mask, self.algo, values=old_values, old_logp=old_logp,
                                                 ref_logp=ref_logp, well_formed=formed_t)
        batch["advantages"] = advantages
        if old_logp is not None:
            batch["old_logp"] = old_logp
        if ref_logp is not None:
            batch["ref_logp"] = ref_logp
        if returns is not None:
            batch.update(old_values=old_values, returns=returns)
        model.module.train()
        metrics_acc: dict[str, float] = {}
        n_updates = 0
        total_tokens = mask.sum().clamp(min=1.0)
        engine = batch.pop("old_logprobs")  # (B, T): the rollout engine's log-probs, NaN where unknown
        batch["engine_logp"] = engine
        gap = _GapMeter()
        net = getattr(model.module, "module", model.module)  # under DDP, the wrapped _PolicyWithValue
        run_before = getattr(net, "trained_tokens", 0)
        for epoch in range(self.cfg.update_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            mbs = self.micro_batches(batch)
            # the template every row shares runs once an epoch; its gradient goes back after the last micro-batch
            template = model.shared_template(batch) if len(mbs) > 1 else None
            for i, mb in enumerate(mbs):
                # token-mean over the whole batch, not per micro-batch: weight each by its share of tokens
                weight = mb["loss_mask"].sum() / total_tokens
                with gradient_sync(model.module, model.world_size, sync=i == len(mbs) - 1):
                    logp, entropy, values = model.forward(model.module, mb, model.value_head is not None,
                                                          template=template)
                    old_mb = mb["old_logp"] if "old_logp" in mb else logp.detach()
                    if epoch == 0:
                        # the learner's policy before this update, token for token against the engine's
                        gap.add(old_mb, mb["engine_logp"], mb["loss_mask"])
                    adv = mb["advantages"]
                    if self.cfg.tis_cap is not None:
                        adv = adv * tis_weights(old_mb, mb["engine_logp"], self.cfg.tis_cap)
                    loss, m = self.policy_loss(logp, old_mb, adv, mb["loss_mask"], self.algo, values=values,
                                               old_values=mb.get("old_values"), returns=mb.get("returns"),
                                               ref_logp=mb.get("ref_logp"), entropy=entropy)
                    (loss * weight).backward()
                for k, v in m.items():
                    metrics_acc[k] = metrics_acc.get(k, 0.0) + float(v) * float(weight)
            if template is not None:
                template.backward()
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
            if float(grad_norm) > 0.0:
                self.optimizer.step()
            else:
                # no gradient (every group tied, no KL or entropy term): the weights stay where they are;
                # AdamW's momentum would otherwise keep moving them along the last steps' direction
                metrics_acc["learner/skipped_updates"] = metrics_acc.get("learner/skipped_updates", 0.0) + 1.0
            metrics_acc["learner/grad_norm"] = metrics_acc.get("learner/grad_norm", 0.0) + float(grad_norm)
            n_updates += 1
        self.version += 1
        self.rl_updates += 1
        metrics = {k: v / n_updates for k, v in metrics_acc.items()}
        metrics["learner/lr"] = self.optimizer.param_groups[0]["lr"]
        metrics.update(gap.metrics())
        metrics["learner/policy_tokens"] = float(total_tokens)
        # positions the update's forward and backward passes ran (a group's shared prompt once): its FLOPs
        metrics["learner/tokens"] = float(getattr(net, "trained_tokens", 0) - run_before)
        metrics["time/learn_s"] = time.perf_counter() - t0
        return {k: v for k, v in metrics.items() if math.isfinite(v)}

    def sft_step(self, trajectories: Sequence[TrajectoryTokens], lr: float | None = None) -> dict[str, float]:
        """One supervised step (cold start): mean NLL of the policy tokens, information masked out."""
        t0 = time.perf_counter()
        model = self.model
        batch = collate(trajectories, model.tokenizer.pad_token_id)
        batch.pop("old_logprobs")  # demonstrations were not sampled: no engine log-probs
        batch = {k: v.to(model.device) for k, v in batch.items()}
        batch["loss_mask"] = batch["loss_mask"].float()
        total = batch["loss_mask"].sum().clamp(min=1.0)
        if lr is not None:
            saved = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = lr
        model.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        nll_sum = 0.0
        mbs = self.micro_batches(batch)
        template = model.shared_template(batch) if len(mbs) > 1 else None
        for i, mb in enumerate(mbs):
            with gradient_sync(model.module, model.world_size, sync=i == len(mbs) - 1):
                logp, _, _ = model.forward(model.module, mb, False, with_entropy=False, template=template)
                nll = -(logp * mb["loss_mask"]).sum() / total  # token-mean over the whole batch
                nll.backward()
            nll_sum += float(nll.detach())
        if template is not None:
            template.backward()
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        self.optimizer.step()
        if lr is not None:
            for g, old in zip(self.optimizer.param_groups, saved):
                g["lr"] = old
        self.version += 1
        return {"sft/nll": nll_sum, "sft/grad_norm": float(grad_norm), "sft/tokens": float(total),
                "time/sft_s": time.perf_counter() - t0}

    def reset_moments(self) -> None:
        """Forget AdamW's moments (and its step count): RL starts with a fresh optimizer, as a run started
        with ``init_from`` does. The cold start's last gradients otherwise keep moving the weights through the
        first RL steps (momentum 0.9: about ten steps' worth), whatever RL's own gradients say."""
        self.optimizer.state.clear()

    def _warm_up_lr(self) -> None:
        """RL update k of ``lr_warmup_steps`` W runs at k/W of each group's learning rate (verl's warm-up);
        the clock is ``rl_updates``, so the cold start's steps do not count and a restore keeps it."""
        warm = self.cfg.lr_warmup_steps
        factor = min(1.0, (self.rl_updates + 1) / warm) if warm else 1.0
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * factor

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's optimizer state (under FSDP its shards only: each rank saves its own)."""
        if self.model.fsdp:
            return fsdp.local_optimizer_state(self.optimizer)
        return self.optimizer.state_dict()

    def load_optimizer_state(self, sd: dict[str, Any]) -> None:
        if self.model.fsdp:
            fsdp.load_local_optimizer_state(self.optimizer, sd)
        else:
            self.optimizer.load_state_dict(sd)


@contextlib.contextmanager
def gradient_sync(module: torch.nn.Module, world_size: int, sync: bool) -> Iterator[None]:
    """One micro-batch's forward and backward when gradients accumulate over micro-batches: they are reduced
    across ranks only with the last one (``sync``). DDP: ``no_sync()``. FSDP2 modules have no ``no_sync``;
    each sharded module's ``set_requires_gradient_sync`` is the way (else every micro-batch reduce-scatters
    the full fp32 gradients: 32 times a step for the GRPO preset)."""
    if world_size <= 1:
        yield
        return
    sharded = [m for m in module.modules() if hasattr(m, "set_requires_gradient_sync")]
    if sharded:
        for m in sharded:
            m.set_requires_gradient_sync(sync, recurse=False)
        yield
    elif not sync and hasattr(module, "no_sync"):
        with module.no_sync():
            yield
    else:
        yield


def micro_batches(batch: dict[str, torch.Tensor], size: int, group_size: int = 1) -> list[dict[str, torch.Tensor]]:
    """Row chunks of at most ``size``. GRPO's item-major groups (``group_size`` rows each) stay whole: a
    ``size`` of at least one group gives chunks of as many whole groups as fit (the groups' shared template and
    each group's prompt run once, ``model.prompt_groups``); a smaller one splits each group, never mixing
    two. The number of chunks depends only on the batch size, the same on every DDP rank."""
    n = batch["input_ids"].shape[0]
    if group_size > 1 and n % group_size == 0 and size >= group_size:
        # whole groups, as many as fit: their prompts' shared template runs once (``model.prompt_groups``)
        step = size // group_size * group_size
        starts = list(range(0, n, step))
        ends = [min(s + step, n) for s in starts]
        return [{k: v[s:e] for k, v in batch.items()} for s, e in zip(starts, ends)]
    block = group_size if group_size > 1 and n % group_size == 0 else n
    starts = [b + i for b in range(0, n, block) for i in range(0, block, size)]
    ends = [min(s + size, (s // block + 1) * block) for s in starts]
    return [{k: v[s:e] for k, v in batch.items()} for s, e in zip(starts, ends)]


def tis_weights(learner_logp: torch.Tensor, engine_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights min(pi_learner / pi_engine, cap), (B, T), detached; 1 where the
    engine's log-prob is unknown (NaN). Corrects for sampling from the engine rather than the learner."""
    known = torch.isfinite(engine_logp)
    log_w = torch.where(known, learner_logp.detach() - torch.nan_to_num(engine_logp), torch.zeros_like(engine_logp))
    return torch.exp(log_w).clamp(max=cap)


class _GapMeter:
    """Accumulates, over policy tokens with a known engine log-prob, |learner - engine| and the importance
    ratio exp(learner - engine): ``rollout/logprob_gap``, ``rollout/is_ratio_mean``, ``rollout/is_ratio_max``.

    Right after a weight sync the two must agree to float noise; a large gap means the rollout samples
    from another policy than the one the learner updates (a sync bug, or numerics)."""

    def __init__(self) -> None:
        self.abs_sum, self.ratio_sum, self.ratio_max, self.n = 0.0, 0.0, 0.0, 0

    @torch.no_grad()
    def add(self, learner_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> None:
        # learner_logp, engine_logp, mask: (B, T)
        sel = mask.bool() & torch.isfinite(engine_logp)
        if not bool(sel.any()):
            return
        diff = (learner_logp.detach() - engine_logp)[sel].double()  # (N,)
        ratio = diff.exp()
        self.abs_sum += float(diff.abs().sum())
        self.ratio_sum += float(ratio.sum())
        self.ratio_max = max(self.ratio_max, float(ratio.max()))
        self.n += int(sel.sum())

    def metrics(self) -> dict[str, float]:
        if not self.n:
            return {}
        return {"rollout/logprob_gap": self.abs_sum / self.n, "rollout/is_ratio_mean": self.ratio_sum / self.n,
                "rollout/is_ratio_max": self.ratio_max, "rollout/logprob_tokens": float(self.n)}
