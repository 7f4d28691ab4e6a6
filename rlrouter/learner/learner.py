"""Learner: one rank of the policy update (GRPO or PPO) on collated trajectories. Pure torch + peft.

``LearnerGroup`` (``rlrouter.learner.group``) runs one Learner per Ray Train worker; on one process it
runs as is (tests, debugging). Under ``torch.distributed`` the model is wrapped in DDP (gloo on CPU,
NCCL on CUDA) or sharded with FSDP2 (``strategy: fsdp``, ``rlrouter.learner.fsdp``; CPU/gloo works too).

Precision: the weights and AdamW's state are always fp32 (the master copy); ``dtype: bfloat16`` runs
forward and backward in bf16 (autocast, or FSDP2's ``MixedPrecisionPolicy``). Pure-bf16 AdamW would
round away updates below 2^-8 of a weight, i.e. every update at Router-R1's lr of 1e-6.

LoRA: the frozen base model with its adapter disabled *is* the reference policy, so KL costs one
extra forward pass and no second copy of the weights. Full fine-tuning keeps a frozen copy.
PPO's critic is a value head on the policy's last hidden states (a shared trunk, as TRL's
``AutoModelForCausalLMWithValueHead``) with its own learning rate.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from rlrouter.algos.common import token_logprobs, token_logprobs_and_entropy
from rlrouter.algos.grpo import GRPOConfig, compute_grpo_advantages, grpo_loss
from rlrouter.algos.ppo import PPOConfig, ValueHead, compute_ppo_advantages, ppo_loss
from rlrouter.rollout.parsing import TrajectoryTokens, collate
from rlrouter.sync.transports import FUSED_GROUPS


@dataclass
class LearnerConfig:
    """The policy update. Defaults suit SmolLM2-135M with LoRA on CPU."""

    model: str = "smollm2-135m-instruct"
    algo: str = "grpo"
    """"grpo" (group-normalised advantages, no critic) or "ppo" (critic + GAE)."""
    lora: bool = True
    """Train a LoRA adapter (peft) instead of every weight."""
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    lr: float = 1e-5
    """Actor learning rate (Router-R1: 1e-6 full fine-tuning of 3B; LoRA on 135M needs more)."""
    critic_lr: float = 1e-5
    """Value-head learning rate (Router-R1: 1e-5)."""
    lr_warmup_steps: int = 0
    """RL updates over which the learning rates ramp linearly up to ``lr`` / ``critic_lr`` (update k of W
    uses k/W of them, as verl's ``lr_warmup_steps``); 0: constant. The cold start uses ``train.warmup_lr``."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 8
    """Most trajectories per forward/backward; gradients accumulate over the batch. GRPO chunks never
    mix two prompts' groups, so ``n_samples`` here lets a group's shared prompt run once."""
    update_epochs: int = 1
    """Passes over each rollout batch (PPO epochs)."""
    temperature: float = 1.0
    """Must equal the rollout temperature: log-probs are taken from the same tempered distribution."""
    strategy: str = "ddp"
    """"ddp" (every rank holds all weights) or "fsdp" (FSDP2: weights, grads and AdamW state sharded)."""
    dtype: str = "float32"
    """Compute dtype: "float32" or "bfloat16" (autocast; master weights and optimizer state stay fp32)."""
    kl_reference: str = "start"
    """The KL reference policy: "start", the policy RL starts from (after the cold start or ``init_from``,
    as DeepSeek-R1 keeps its SFT model as reference), or "base", the model before any training. With
    "base" after a cold start, the KL pulls toward a policy that never learned the format (issue 13)."""
    tis_cap: float | None = None
    """Rollout correction (truncated importance sampling, as verl's and OpenRLHF's): weight each policy
    token's loss by min(pi_learner / pi_engine, tis_cap), the engine being the vLLM that sampled it.
    None: off. The mismatch it corrects is logged every step as ``rollout/logprob_gap``."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward: activation memory of ~one layer, ~1.3x compute."""
    keep_checkpoints: int = 0
    """How many of the newest checkpoints stay on disk (a 3B full fine-tune's is ~46 GiB); 0 keeps all."""
    grpo: dict[str, Any] = field(default_factory=dict)
    ppo: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algo not in ("grpo", "ppo"):
            raise ValueError(f"learner.algo: 'grpo' or 'ppo', got {self.algo!r}")
        if self.strategy not in ("ddp", "fsdp"):
            raise ValueError(f"learner.strategy: 'ddp' or 'fsdp', got {self.strategy!r}")
        for f in ("lr", "critic_lr"):
            if not getattr(self, f) > 0:
                raise ValueError(f"learner.{f}: must be > 0, got {getattr(self, f)!r}")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise ValueError(f"learner.lr_warmup_steps: an int >= 0, got {self.lr_warmup_steps!r}")
        if self.micro_batch_size < 1 or self.update_epochs < 1:
            raise ValueError("learner.micro_batch_size and learner.update_epochs: must be >= 1")
        if self.kl_reference not in ("start", "base"):
            raise ValueError(f"learner.kl_reference: 'start' or 'base', got {self.kl_reference!r}")
        if self.tis_cap is not None and not self.tis_cap >= 1.0:
            raise ValueError(f"learner.tis_cap: must be >= 1 (or null: off), got {self.tis_cap!r}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"learner.dtype: 'float32' or 'bfloat16', got {self.dtype!r}")
        if not isinstance(self.keep_checkpoints, int) or self.keep_checkpoints < 0:
            raise ValueError(f"learner.keep_checkpoints: an int >= 0 (0 keeps all), got {self.keep_checkpoints!r}")

    @property
    def algo_cfg(self) -> GRPOConfig | PPOConfig:
        return GRPOConfig(**self.grpo) if self.algo == "grpo" else PPOConfig(**self.ppo)


class Learner:
    """Holds the policy (and critic), computes advantages and applies the update."""

    def __init__(self, cfg: LearnerConfig, rank: int = 0, world_size: int = 1, device: str | torch.device = "cpu"):
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM

        from rlrouter.models import load_tokenizer, resolve_model

        self.cfg = cfg
        self.algo = cfg.algo_cfg
        self.rank, self.world_size, self.device = rank, world_size, torch.device(device)
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)  # NCCL and FSDP's device mesh use the current device
        self.fsdp = cfg.strategy == "fsdp" and dist.is_available() and dist.is_initialized()
        self.compute_dtype = getattr(torch, cfg.dtype)
        path = resolve_model(cfg.model)
        self.tokenizer = load_tokenizer(cfg.model)
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # fp32 master weights
        if cfg.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.ref_model = None
        self.ref_adapter: dict[str, torch.Tensor] | None = None  # LoRA: the reference's adapter weights
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            lcfg = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules=list(cfg.lora_targets),
                              lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
            self.policy = get_peft_model(base, lcfg)
        else:
            self.policy = base
            if self._kl_needed():
                # frozen, so no master copy is needed: held in the compute dtype (half the memory in bf16)
                self.ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=self.compute_dtype).eval()
                self.ref_model.requires_grad_(False)
        self.value_head = ValueHead(self.policy.config.hidden_size) if cfg.algo == "ppo" else None
        self.module = self._wrap()
        # built after wrapping: under FSDP the optimizer must hold the sharded parameters (DTensors)
        actor_params = [p for p in self.policy.parameters() if p.requires_grad]
        groups = [{"params": actor_params, "lr": cfg.lr}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": cfg.critic_lr})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
        self.version = 0
        self.rl_updates = 0  # RL train_steps taken (the lr warm-up's clock; checkpointed)
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self._full: dict[str, torch.Tensor] = {}
        if self.fsdp:
            # Weights leave the learner on rank 0 only (sync, checkpoints), but gathering shards is
            # collective: every rank gathers right after each optimizer step, which all ranks take.
            self.optimizer.register_step_post_hook(lambda *_: self._gather_full_state())
            self._gather_full_state()

    # -- setup ------------------------------------------------------------------------------------
    def _kl_needed(self) -> bool:
        return self.algo.kl.enabled

    def _wrap(self) -> torch.nn.Module:
        """The module gradients flow through: DDP or FSDP2 over (policy, value head) when distributed.

        Also builds ``self.ref_module`` (the full fine-tune's frozen reference, sharded like the policy).
        """
        autocast = self.compute_dtype if self.compute_dtype != torch.float32 and not self.fsdp else None
        # HF's checkpointed layers drop a KV cache in training, so the shared-prefix forward would be wrong
        share = not self.cfg.gradient_checkpointing
        net = _PolicyWithValue(self.policy, self.value_head, autocast, share_prefix_in_training=share)
        self.ref_module = None if self.ref_model is None else _PolicyWithValue(self.ref_model, None, autocast)
        if self.fsdp:
            from rlrouter.learner import fsdp

            mesh = fsdp.mesh_for(self.device)
            fsdp.shard(net, self.policy, mesh, self.compute_dtype)
            if self.ref_module is not None:
                fsdp.shard(self.ref_module, self.ref_model, mesh, self.compute_dtype)
            return net
        net.to(self.device)
        if self.ref_module is not None:
            self.ref_module.to(self.device)
        if self.world_size <= 1:
            return net
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        # PPO's value head gets no gradient in the cold start's SFT steps: DDP must be told that unused
        # parameters can occur, or the step after one raises (issue 14). GRPO has no such parameter.
        return DDP(net, device_ids=ids, find_unused_parameters=self.value_head is not None)

    def _gather_full_state(self) -> None:
        from rlrouter.learner import fsdp

        self._full = fsdp.full_state_dict(self.module)

    def _policy_state(self) -> dict[str, torch.Tensor]:
        """The policy's full (unsharded) state dict, HF/peft names; under FSDP from the last gather (rank 0)."""
        if not self.fsdp:
            return self.policy.state_dict()
        if self.rank != 0:
            raise RuntimeError("Learner: under FSDP full weights exist on rank 0 only")
        return {k[len("policy."):]: v for k, v in self._full.items() if k.startswith("policy.")}

    # -- forward passes ---------------------------------------------------------------------------
    def _forward(self, module: torch.nn.Module, mb: dict[str, torch.Tensor], with_values: bool,
                 with_entropy: bool = True):
        """Token log-probs (and entropy, values) of a micro-batch, (B, T) each, aligned with ``input_ids``.

        Only the window from the first policy token on is computed (see ``_PolicyWithValue``): the prompt
        carries no loss, so its logits are never formed; positions before the window are 0.
        """
        start = first_policy_position(mb["loss_mask"])
        out = module(mb["input_ids"], mb["attention_mask"], with_values, start)
        ids = mb["input_ids"][:, start - 1:]  # (B, W): the window's tokens
        if not with_entropy:
            # the (B, W, V) softmax of the entropy is the learner's largest tensor: skip it when unused
            logp, entropy = token_logprobs(out["logits"], ids, self.cfg.temperature), None
        else:
            logp, entropy = token_logprobs_and_entropy(out["logits"], ids, self.cfg.temperature,
                                                       entropy_grad=getattr(self.algo, "entropy_coef", 0) > 0)
        values = out.get("values")
        return tuple(None if x is None else F.pad(x, (start - 1, 0), value=0.0) for x in (logp, entropy, values))

    def set_reference_to_current(self) -> None:
        """Make the current policy the KL reference (``kl_reference: start``; the loop calls this when RL
        begins). With LoRA the reference is a frozen copy of the adapter, swapped in for its forward pass
        (a few MB, no second model); with full fine-tuning the reference model takes the policy's weights."""
        if self.cfg.kl_reference != "start" or not self._kl_needed():
            return
        if self.cfg.lora:
            self.ref_adapter = {n: p.detach().clone() for n, p in self.policy.named_parameters() if p.requires_grad}
        else:
            self.ref_model.load_state_dict(self.policy.state_dict())

    @contextlib.contextmanager
    def _reference_adapter(self):
        """The reference adapter's weights in the policy for the duration (restored after)."""
        params = dict(self.policy.named_parameters())
        saved = {n: params[n].detach().clone() for n in self.ref_adapter}
        with torch.no_grad():
            for n, v in self.ref_adapter.items():
                params[n].copy_(v)
        try:
            yield
        finally:
            with torch.no_grad():
                for n, v in saved.items():
                    params[n].copy_(v)

    @torch.no_grad()
    def _reference_logprobs(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        # through the wrapped module: under FSDP only the root's forward gathers the shared weights
        if self.cfg.lora and getattr(self, "ref_adapter", None) is not None:
            with self._reference_adapter():
                logp, _, _ = self._forward(self.module, mb, False, with_entropy=False)
        elif self.cfg.lora:
            with self.policy.disable_adapter():
                logp, _, _ = self._forward(self.module, mb, False, with_entropy=False)
        else:
            logp, _, _ = self._forward(self.ref_module, mb, False, with_entropy=False)
        return logp

    def _micro_batches(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Row chunks of at most ``micro_batch_size``. GRPO's item-major groups are never mixed in one
        chunk, so each chunk shares its prompt and runs it once (``_PolicyWithValue``); the number of
        chunks depends only on the batch size, the same on every DDP rank."""
        n = batch["input_ids"].shape[0]
        step = self.cfg.micro_batch_size
        group = getattr(self.algo, "group_size", 1)
        block = group if group > 1 and n % group == 0 else n
        starts = [b + i for b in range(0, n, block) for i in range(0, block, step)]
        ends = [min(s + step, (s // block + 1) * block) for s in starts]
        return [{k: v[s:e] for k, v in batch.items()} for s, e in zip(starts, ends)]

    # -- the update -------------------------------------------------------------------------------
    def train_step(self, trajectories: Sequence[TrajectoryTokens], rewards: Sequence[float],
                   pad_to: int | None = None) -> dict[str, float]:
        """One policy update on this rank's trajectories (item-major groups for GRPO)."""
        t0 = time.perf_counter()
        batch = collate(trajectories, self.tokenizer.pad_token_id, pad_to=pad_to)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        batch["loss_mask"] = batch["loss_mask"].float()
        rewards_t = torch.tensor(list(rewards), dtype=torch.float32, device=self.device)  # (B,)
        mbs = self._micro_batches(batch)
        # old log-probs are recomputed here (verl does the same): vLLM's sampled log-probs are raw and
        # differ slightly from the learner's numerics, so the first ratio would not be exactly 1
        # GRPO with one update epoch and no KL in the reward: every micro-batch's forward runs before the
        # single optimizer step, so old log-probs equal the new ones; reuse them (detached) instead of
        # a separate pass over the batch (a third of the learner's compute).
        reuse_old = isinstance(self.algo, GRPOConfig) and self.cfg.update_epochs == 1 and not self.algo.kl.in_reward
        self.module.eval()
        with torch.no_grad():
            ref_logp = torch.cat([self._reference_logprobs(mb) for mb in mbs]) if self._kl_needed() else None
            if reuse_old:
                old_logp, old_values = None, None
            else:
                old = [self._forward(self.module, mb, self.value_head is not None, with_entropy=False) for mb in mbs]
                old_logp = torch.cat([o[0] for o in old])  # (B, T)
                old_values = torch.cat([o[2] for o in old]) if self.value_head is not None else None
        mask = batch["loss_mask"]
        warm = self.cfg.lr_warmup_steps
        factor = min(1.0, (self.rl_updates + 1) / warm) if warm else 1.0
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * factor
        if isinstance(self.algo, GRPOConfig):
            advantages = compute_grpo_advantages(rewards_t, mask, self.algo, old_logp, ref_logp)
            returns = None
        else:
            advantages, returns = compute_ppo_advantages(rewards_t, old_values, mask, self.algo, old_logp, ref_logp)
        batch["advantages"] = advantages
        if old_logp is not None:
            batch["old_logp"] = old_logp
        if ref_logp is not None:
            batch["ref_logp"] = ref_logp
        if returns is not None:
            batch.update(old_values=old_values, returns=returns)
        self.module.train()
        metrics_acc: dict[str, float] = {}
        n_updates = 0
        total_tokens = mask.sum().clamp(min=1.0)
        engine = batch.pop("old_logprobs")  # (B, T): the rollout engine's log-probs, NaN where unknown
        batch["engine_logp"] = engine
        gap = _GapMeter()
        for epoch in range(self.cfg.update_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            mbs = self._micro_batches(batch)
            for i, mb in enumerate(mbs):
                # token-mean over the whole batch, not per micro-batch: weight each by its share of tokens
                weight = mb["loss_mask"].sum() / total_tokens
                sync = i == len(mbs) - 1
                ctx = self.module.no_sync() if (self.world_size > 1 and not sync and hasattr(self.module, "no_sync")) \
                    else contextlib.nullcontext()
                with ctx:
                    logp, entropy, values = self._forward(self.module, mb, self.value_head is not None)
                    old_mb = mb["old_logp"] if "old_logp" in mb else logp.detach()
                    if epoch == 0:
                        # the learner's policy before this update, token for token against the engine's
                        gap.add(old_mb, mb["engine_logp"], mb["loss_mask"])
                    adv = mb["advantages"]
                    if self.cfg.tis_cap is not None:
                        adv = adv * tis_weights(old_mb, mb["engine_logp"], self.cfg.tis_cap)
                    if isinstance(self.algo, GRPOConfig):
                        loss, m = grpo_loss(logp, old_mb, adv, mb["loss_mask"], self.algo,
                                            ref_logp=mb.get("ref_logp"), entropy=entropy)
                    else:
                        loss, m = ppo_loss(logp, mb["old_logp"], adv, values, mb["old_values"],
                                           mb["returns"], mb["loss_mask"], self.algo, ref_logp=mb.get("ref_logp"),
                                           entropy=entropy)
                    (loss * weight).backward()
                for k, v in m.items():
                    metrics_acc[k] = metrics_acc.get(k, 0.0) + float(v) * float(weight)
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
            self.optimizer.step()
            metrics_acc["learner/grad_norm"] = metrics_acc.get("learner/grad_norm", 0.0) + float(grad_norm)
            n_updates += 1
        self.version += 1
        self.rl_updates += 1
        metrics = {k: v / n_updates for k, v in metrics_acc.items()}
        metrics["learner/lr"] = self.optimizer.param_groups[0]["lr"]
        metrics.update(gap.metrics())
        metrics["learner/policy_tokens"] = float(total_tokens)
        metrics["time/learn_s"] = time.perf_counter() - t0
        return {k: v for k, v in metrics.items() if math.isfinite(v)}

    def sft_step(self, trajectories: Sequence[TrajectoryTokens], lr: float | None = None) -> dict[str, float]:
        """One supervised step (cold start): mean NLL of the policy tokens, information masked out."""
        t0 = time.perf_counter()
        batch = collate(trajectories, self.tokenizer.pad_token_id)
        batch.pop("old_logprobs")  # demonstrations were not sampled: no engine log-probs
        batch = {k: v.to(self.device) for k, v in batch.items()}
        batch["loss_mask"] = batch["loss_mask"].float()
        total = batch["loss_mask"].sum().clamp(min=1.0)
        if lr is not None:
            saved = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = lr
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        nll_sum = 0.0
        for mb in self._micro_batches(batch):
            logp, _, _ = self._forward(self.module, mb, False, with_entropy=False)
            nll = -(logp * mb["loss_mask"]).sum() / total  # token-mean over the whole batch
            nll.backward()
            nll_sum += float(nll.detach())
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        self.optimizer.step()
        if lr is not None:
            for g, old in zip(self.optimizer.param_groups, saved):
                g["lr"] = old
        self.version += 1
        return {"sft/nll": nll_sum, "sft/grad_norm": float(grad_norm), "sft/tokens": float(total),
                "time/sft_s": time.perf_counter() - t0}

    # -- weights out ------------------------------------------------------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint must hold to restore training: the adapter (or all weights) and the critic.

        Full tensors on CPU; under FSDP, rank 0's copy from the gather after the last optimizer step.
        """
        trainable = {n for n, p in self.policy.named_parameters() if p.requires_grad}
        sd = {f"policy.{k}": v.detach().cpu().contiguous() for k, v in self._policy_state().items() if k in trainable}
        if self.value_head is not None:
            vh = ({k[len("value_head."):]: v for k, v in self._full.items() if k.startswith("value_head.")}
                  if self.fsdp else self.value_head.state_dict())
            sd.update({f"value_head.{k}": v.detach().cpu().contiguous() for k, v in vh.items()})
        return sd

    def load_trainable_state(self, sd: dict[str, torch.Tensor]) -> None:
        """Restore ``trainable_state``'s output; under FSDP every rank calls it and keeps its slice."""
        if self.fsdp:
            from rlrouter.learner import fsdp

            fsdp.load_full_state_dict(self.module, sd)
            self._gather_full_state()
            return
        params = dict(self.policy.named_parameters())
        with torch.no_grad():
            for k, v in sd.items():
                if k.startswith("policy."):
                    name = k[len("policy."):]
                    if name not in params:
                        raise KeyError(f"checkpoint: parameter '{name}' not in the policy")
                    params[name].copy_(v)
            if self.value_head is not None:
                self.value_head.load_state_dict({k[len("value_head."):]: v for k, v in sd.items()
                                                 if k.startswith("value_head.")})

    def save_adapter(self, path: str) -> str:
        """The LoRA adapter in peft format (safetensors), the way vLLM's LoRARequest reads it."""
        self.policy.save_pretrained(path, safe_serialization=True,
                                    state_dict=self._policy_state() if self.fsdp else None)
        return path

    def save_model(self, path: str) -> str:
        """The full policy in HF format (full fine-tuning), from the gathered weights under FSDP."""
        self.policy.save_pretrained(path, safe_serialization=True,
                                    state_dict=self._policy_state() if self.fsdp else None)
        self.tokenizer.save_pretrained(path)
        return path

    def local_tensors(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Parameter-shaped tensors as this rank holds them (under FSDP: the local slices), on CPU."""
        from torch.distributed.tensor import DTensor

        return {k: (v.to_local() if isinstance(v, DTensor) else v).detach().cpu() for k, v in tensors.items()}

    def reference_state(self) -> dict[str, torch.Tensor] | None:
        """The start-policy KL reference a checkpoint must keep (None: the base model is the reference):
        the LoRA adapter copy, or the full fine-tune's reference parameters (tied ones once)."""
        if self.cfg.lora:
            return self.ref_adapter
        if self.ref_model is None or self.cfg.kl_reference != "start":
            return None
        if self.fsdp:
            # FSDP2 leaves the root's parameters unsharded after its forward (no reshard at the root):
            # reshard, so each rank gives its own slices (DTensors), as the restore expects
            self.ref_module.reshard()
        return {n: p.detach() for n, p in self.ref_model.named_parameters()}

    def load_reference_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore ``reference_state``'s local tensors (this rank's slices under FSDP)."""
        if self.cfg.lora:
            self.ref_adapter = self.restore_local(tensors)
            return
        if self.ref_model is None:
            raise ValueError("checkpoint: holds a KL reference model, but this learner has none "
                             "(learner.lora=false with the KL term off)")
        params = dict(self.ref_model.named_parameters())
        if set(params) != set(tensors):
            raise KeyError(f"checkpoint: reference parameters differ from the model's: missing "
                           f"{sorted(set(params) - set(tensors))[:3]}, unexpected {sorted(set(tensors) - set(params))[:3]}")
        from torch.distributed.tensor import DTensor

        with torch.no_grad():  # each rank writes its own slice (FSDP) or the whole tensor
            for n, v in tensors.items():
                p = params[n]
                (p.to_local() if isinstance(p, DTensor) else p).copy_(v)

    def restore_local(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Inverse of ``local_tensors`` for tensors named like the policy's parameters."""
        params = dict(self.policy.named_parameters())
        if not self.fsdp:
            return {k: v.to(params[k].device) for k, v in tensors.items()}
        from torch.distributed.tensor import DTensor

        return {k: DTensor.from_local(v.to(params[k].device), params[k].device_mesh, params[k].placements,
                                      shape=params[k].shape, stride=params[k].stride()) for k, v in tensors.items()}

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's optimizer state (under FSDP its shards only: each rank saves its own)."""
        if self.fsdp:
            from rlrouter.learner import fsdp

            return fsdp.local_optimizer_state(self.optimizer)
        return self.optimizer.state_dict()

    def load_optimizer_state(self, sd: dict[str, Any]) -> None:
        if self.fsdp:
            from rlrouter.learner import fsdp

            fsdp.load_local_optimizer_state(self.optimizer, sd)
        else:
            self.optimizer.load_state_dict(sd)

    def merged_weights(self, only_changed: bool = True) -> list[tuple[str, torch.Tensor]]:
        """HF-named full tensors (CPU) with the adapter merged in (W + scale * B @ A).

        ``only_changed``: with LoRA, only the adapted modules differ from the engine's base weights,
        so only their fused groups are sent (SmolLM2, LoRA on q/v: q, k, v of 30 layers, 66 MB
        instead of 513 MB). Under FSDP: rank 0, from the weights gathered after the last step.
        In the compute dtype: with ``dtype: bfloat16`` the engine gets the bf16 weights the learner
        computes with (half the bytes of the fp32 masters: 6.2 instead of 12.4 GB for a 3B model).
        """
        return [(k, v.to(self.compute_dtype) if v.is_floating_point() else v) for k, v in self._merged(only_changed)]

    def _merged(self, only_changed: bool = True) -> list[tuple[str, torch.Tensor]]:
        state = self._policy_state()
        if not self.cfg.lora:
            return [(k, v.detach().cpu()) for k, v in state.items()]
        out = []
        with torch.no_grad():
            for name, mod in self.policy.named_modules():
                if not hasattr(mod, "lora_A") or "default" not in getattr(mod, "lora_A", {}):
                    continue
                a, b = state[f"{name}.lora_A.default.weight"], state[f"{name}.lora_B.default.weight"]
                merged = state[f"{name}.base_layer.weight"] + (b @ a) * mod.scaling["default"]
                hf_name = name.replace("base_model.model.", "", 1) + ".weight"
                out.append((hf_name, merged.detach().cpu().contiguous()))
        base = {k.replace("base_model.model.", "", 1).replace(".base_layer", ""): v for k, v in state.items()
                if "lora_" not in k}
        sent = {k for k, _ in out}
        if only_changed:
            # vLLM fuses q/k/v (and gate/up) into one tensor; an in-place reload that brings only some
            # shards of a fused tensor materialises the rest from nothing (measured: garbage output).
            # So every shard (and bias) of a touched group goes along, unchanged ones from the base.
            wanted = set()
            for name in sent:
                prefix, _, leaf = name.rpartition(".")[0].rpartition(".")
                for group in FUSED_GROUPS:
                    if leaf in group:
                        wanted |= {f"{prefix}.{m}.{kind}" for m in group for kind in ("weight", "bias")}
            extra = sorted(k for k in wanted - sent if k in base)
        else:
            extra = sorted(k for k in base if k not in sent)
        out.extend((k, base[k].detach().cpu()) for k in extra)
        return out

    def state_for_checkpoint(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer_state(), "version": self.version, "config": asdict(self.cfg)}


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



def first_policy_position(loss_mask: torch.Tensor) -> int:
    """The first position any row of ``loss_mask`` (B, T) trains on; >= 1 (token 0 has no log-prob)."""
    has = loss_mask.bool().any(dim=0)  # (T,)
    if not bool(has.any()):
        return loss_mask.shape[1]  # nothing to train on: a one-position window keeps shapes valid
    return max(1, int(has.float().argmax()))


MIN_SHARED_PREFIX = 8
"""Shorter common prefixes are not worth a separate forward with a KV cache."""


def common_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, limit: int) -> int:
    """How many leading real tokens (at most ``limit``) every row of the micro-batch holds alike.

    A GRPO group shares its whole prompt; different questions still share the Router-R1 template
    (rules and candidate list, ~350 tokens) that comes before the question.
    """
    if input_ids.shape[0] < 2 or limit < 1:
        return 0
    head = input_ids[:, :limit]  # (B, limit)
    same = (head == head[:1]).all(dim=0) & attention_mask[:, :limit].bool().all(dim=0)  # (limit,)
    return limit if bool(same.all()) else int((~same).float().argmax())


class _PolicyWithValue(torch.nn.Module):
    """One module for DDP: the policy's logits and, for PPO, the critic's values, over a window.

    ``forward(..., start)`` returns logits (and values) for positions ``start - 1 .. T - 1`` only, the
    ones that predict tokens ``start .. T - 1``: the prompt before ``start`` carries no loss, so its
    (T, V) logits are never formed (``logits_to_keep``). The tokens every row shares before ``start``
    (a GRPO group's whole prompt, or the template before different questions) run once with their KV
    cache, which is repeated to the B rows and back-propagated through once; each row then runs only
    its own tokens.
    With a ~480-token prompt and ~60 generated tokens per sample this cuts the learner's tokens ~3x
    for G=4 and gives the same log-probs and gradients (tests/learner/test_learner.py).
    """

    def __init__(self, policy: torch.nn.Module, value_head: torch.nn.Module | None,
                 autocast: torch.dtype | None = None, share_prefix_in_training: bool = True):
        super().__init__()
        self.policy = policy
        self.value_head = value_head
        self.autocast = autocast
        """bf16 autocast over fp32 weights (DDP / one rank); None under FSDP2, whose policy casts."""
        self.share_prefix_in_training = share_prefix_in_training

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_values: bool,
                start: int = 1) -> dict:
        with torch.autocast(input_ids.device.type, dtype=self.autocast or torch.float32,
                            enabled=self.autocast is not None):
            return self._forward(input_ids, attention_mask, with_values, start)

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_values: bool,
                 start: int) -> dict:
        # input_ids, attention_mask: (B, T); W = T - start + 1 positions come back
        hidden = with_values and self.value_head is not None
        window = input_ids.shape[1] - start + 1  # W
        prefix = common_prefix_length(input_ids, attention_mask, start - 1)
        if prefix >= MIN_SHARED_PREFIX and (self.share_prefix_in_training or not self.training):
            head = self.policy(input_ids=input_ids[:1, :prefix], use_cache=True, logits_to_keep=1)
            cache = head.past_key_values
            cache.batch_repeat_interleave(input_ids.shape[0])  # (1, ...) -> (B, ...), grads flow to row 0
            out = self.policy(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, past_key_values=cache,
                              use_cache=True, logits_to_keep=window, output_hidden_states=hidden)
        else:
            out = self.policy(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=window,
                              output_hidden_states=hidden)
        res = {"logits": out.logits}  # (B, W, V)
        if hidden:
            res["values"] = self.value_head(out.hidden_states[-1][:, -window:])  # (B, W)
        return res
