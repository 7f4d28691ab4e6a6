"""The model and weights part of a learner rank: the policy (and critic) built, wrapped and read out.

``LearnerModel`` builds the policy from its HF weights (LoRA with peft, or every weight), adds PPO's
critic when the algorithm's advantage estimator needs one, keeps the frozen KL reference, and wraps
them for ``torch.distributed``: DDP (gloo on CPU, NCCL on CUDA) or FSDP2 (``strategy: fsdp``,
``rlrouter.learner.fsdp``). It runs the forward passes the update step asks for and moves weights out
(weight sync, checkpoints) and back in (restore). It holds no optimizer: that is the update step's
(``rlrouter.learner.update``).

Precision: the weights are always fp32 (the master copy); ``dtype: bfloat16`` runs forward and
backward in bf16 (autocast, or FSDP2's ``MixedPrecisionPolicy``).

LoRA: the frozen base model with its adapter disabled *is* the reference policy, so KL costs one
extra forward pass and no second copy of the weights. Full fine-tuning keeps a frozen copy.
PPO's critic is a value head on the policy's last hidden states (a shared trunk, as TRL's
``AutoModelForCausalLMWithValueHead``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlrouter.algos.common import chunked_logprobs_and_entropy
from rlrouter.algos.ppo import ValueHead
from rlrouter.algos.registry import get_adv_estimator
from rlrouter.learner import fsdp
from rlrouter.learner.config import LearnerConfig
from rlrouter.sync.transports import FUSED_GROUPS


class LearnerModel:
    """One rank's policy, critic and KL reference: built, wrapped for DDP/FSDP, run forward, read and restored."""

    def __init__(self, cfg: LearnerConfig, algo: Any, rank: int = 0, world_size: int = 1,
                 device: str | torch.device = "cpu"):
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM

        from rlrouter.models import load_tokenizer, resolve_model

        self.cfg = cfg
        self.algo = algo
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
            if self.kl_needed:
                # frozen, so no master copy is needed: held in the compute dtype (half the memory in bf16)
                self.ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=self.compute_dtype).eval()
                self.ref_model.requires_grad_(False)
        # a critic only where the algorithm's advantage estimator reads values (PPO's GAE)
        critic = get_adv_estimator(algo.adv_estimator).critic
        self.value_head = ValueHead(self.policy.config.hidden_size) if critic else None
        self.module = self._wrap()
        self._full: dict[str, torch.Tensor] = {}
        if self.fsdp:
            self.gather_full_state()

    # -- setup ------------------------------------------------------------------------------------
    @property
    def kl_needed(self) -> bool:
        """Whether the KL to the reference is on: the reference forward pass runs only then."""
        return self.algo.kl.enabled

    def _wrap(self) -> torch.nn.Module:
        """The module gradients flow through: DDP or FSDP2 over (policy, value head) when distributed.

        Also builds ``self.ref_module`` (the full fine-tune's frozen reference, sharded like the policy).
        """
        autocast = self.compute_dtype if self.compute_dtype != torch.float32 and not self.fsdp else None
        # The shared-prefix forward calls each layer twice before backward: HF's checkpointed layers drop
        # its KV cache, and FSDP2 reshards a layer after each call, so backward through the first call
        # finds the gathered weights freed ("setStorage ... storage of size 0"). Off in training for both;
        # the no-grad passes (old and reference log-probs) still share the prompt.
        share = not self.cfg.gradient_checkpointing and not self.fsdp
        net = _PolicyWithValue(self.policy, self.value_head, autocast, share_prefix_in_training=share)
        self.ref_module = None if self.ref_model is None else _PolicyWithValue(self.ref_model, None, autocast)
        if self.fsdp:
            mesh = fsdp.mesh_for(self.device)
            fsdp.fully_shard_model(net, self.policy, mesh, self.compute_dtype)
            if self.ref_module is not None:
                fsdp.fully_shard_model(self.ref_module, self.ref_model, mesh, self.compute_dtype)
            return net
        net.to(self.device)
        if self.ref_module is not None:
            self.ref_module.to(self.device)
        if self.world_size <= 1:
            return net
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        # PPO's value head gets no gradient in the cold start's SFT steps: DDP must be told that unused
        # parameters can occur, or the step after one raises. GRPO has no such parameter.
        return DDP(net, device_ids=ids, find_unused_parameters=self.value_head is not None)

    def trainable_parameters(self) -> list[dict[str, Any]]:
        """The optimizer's parameter groups: the policy's trainable weights at ``lr``, the critic's at
        ``critic_lr``. Under FSDP these are the sharded parameters (DTensors), so call it after wrapping."""
        groups = [{"params": [p for p in self.policy.parameters() if p.requires_grad], "lr": self.cfg.lr}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": self.cfg.critic_lr})
        return groups

    def gather_full_state(self) -> None:
        """Under FSDP: gather the full weights (collective: every rank calls it after each optimizer step);
        rank 0 keeps them for weight sync and checkpoints."""
        self._full = fsdp.full_state_dict(self.module)

    def policy_state(self) -> dict[str, torch.Tensor]:
        """The policy's full (unsharded) state dict, HF/peft names; under FSDP from the last gather (rank 0)."""
        if not self.fsdp:
            return self.policy.state_dict()
        if self.rank != 0:
            raise RuntimeError("Learner: under FSDP full weights exist on rank 0 only")
        return {k[len("policy."):]: v for k, v in self._full.items() if k.startswith("policy.")}

    # -- forward passes ---------------------------------------------------------------------------
    def forward(self, module: torch.nn.Module, mb: dict[str, torch.Tensor], with_values: bool,
                with_entropy: bool = True, template: "SharedTemplate | None" = None):
        """Token log-probs (and entropy, values) of a micro-batch, (B, T) each, aligned with ``input_ids``.

        Only the window from the first policy token on is computed (see ``_PolicyWithValue``): the prompt
        carries no loss, so its logits are never formed; positions before the window are 0. Columns past
        the micro-batch's longest row are padding of other micro-batches (the batch is padded to its
        longest trajectory): they are not run either, and come back as 0. ``template``: the batch's shared
        template, already run (``shared_template``); the micro-batch's passes start from its KV cache.
        """
        T = mb["input_ids"].shape[1]
        width = used_width(mb["attention_mask"])
        input_ids, attention_mask = mb["input_ids"][:, :width], mb["attention_mask"][:, :width]
        groups = prompt_groups(input_ids, attention_mask, mb["loss_mask"][:, :width])
        if groups is not None and (self.training_shares_prefix or not module.training):
            return self._grouped(module, input_ids, attention_mask, groups, with_values, with_entropy, T, template)
        start = first_policy_position(mb["loss_mask"][:, :width])
        out = module(input_ids, attention_mask, with_values, start, template=template)
        ids = input_ids[:, start - 1:]  # (B, W): the window's tokens
        # in chunks of positions: beyond the logits and their gradient, memory does not grow with window x vocab
        logp, entropy = chunked_logprobs_and_entropy(out["logits"], ids, self.cfg.temperature,
                                                     entropy_grad=with_entropy and getattr(self.algo, "entropy_coef", 0) > 0)
        entropy = entropy if with_entropy else None
        values = out.get("values")
        return tuple(None if x is None else F.pad(x, (start - 1, T - width), value=0.0) for x in (logp, entropy, values))

    @property
    def training_shares_prefix(self) -> bool:
        """Whether training passes run shared prefixes once (off under gradient checkpointing and FSDP: ``_wrap``)."""
        return not self.cfg.gradient_checkpointing and not self.fsdp

    def shared_template(self, batch: dict[str, torch.Tensor]) -> "SharedTemplate | None":
        """The tokens every row of an update's ``batch`` holds alike before its first policy token (Router-R1's
        rules and candidate list), run once with gradients for all its micro-batches (``SharedTemplate``), or
        None: ``learner.share_template`` off, fewer than ``MIN_SHARED_PREFIX`` shared tokens, or where the
        template's backward would escape the gradient reduction (several ranks) or recomputation (gradient
        checkpointing, FSDP)."""
        if not self.cfg.share_template or not self.training_shares_prefix or self.world_size > 1:
            return None
        width = used_width(batch["attention_mask"])
        input_ids, attention_mask = batch["input_ids"][:, :width], batch["attention_mask"][:, :width]
        start = first_policy_position(batch["loss_mask"][:, :width])
        length = common_prefix_length(input_ids, attention_mask, start - 1)
        if length < MIN_SHARED_PREFIX:
            return None
        net = getattr(self.module, "module", self.module)  # _PolicyWithValue (unwrapped: one rank)
        return net.run_template(input_ids[0, :length])

    def _grouped(self, module: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 groups: PromptGroups, with_values: bool, with_entropy: bool, T: int,
                 template: "SharedTemplate | None" = None):
        """``forward`` over several prompt groups (``_PolicyWithValue._grouped_forward``): each row's window
        scored, then placed at its own position in the (B, T) result."""
        out = module(input_ids, attention_mask, with_values, 1, groups, template=template)
        logits, offsets = out["logits"], out["offsets"].tolist()  # (B, W, V), (B,)
        W = logits.shape[1]
        cols = torch.tensor(offsets, device=input_ids.device)[:, None] + torch.arange(W, device=input_ids.device)
        ids = input_ids.gather(1, cols.clamp(max=input_ids.shape[1] - 1))  # (B, W): the tokens at each window's positions
        logp, entropy = chunked_logprobs_and_entropy(logits, ids, self.cfg.temperature,
                                                     entropy_grad=with_entropy and getattr(self.algo, "entropy_coef", 0) > 0)
        entropy = entropy if with_entropy else None
        values = out.get("values")

        def place(x: torch.Tensor | None) -> torch.Tensor | None:
            # row b's window holds positions offsets[b] .. offsets[b] + W - 1; past the row's end it is padding
            if x is None:
                return None
            rows = [F.pad(x[b, :T - o], (o, max(0, T - o - W)), value=0.0) for b, o in enumerate(offsets)]
            return torch.stack(rows)

        return place(logp), place(entropy), place(values)

    # -- the KL reference ---------------------------------------------------------------------------
    def set_reference_to_current(self) -> None:
        """Make the current policy the KL reference (``kl_reference: start``; the loop calls this when RL
        begins). With LoRA the reference is a frozen copy of the adapter, swapped in for its forward pass
        (a few MB, no second model); with full fine-tuning the reference model takes the policy's weights."""
        if self.cfg.kl_reference != "start" or not self.kl_needed:
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
    def reference_logprobs(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """The KL reference's token log-probs of a micro-batch, (B, T): the adapter copy swapped in, the
        adapter switched off (the base model), or the full fine-tune's frozen model."""
        # through the wrapped module: under FSDP only the root's forward gathers the shared weights
        if self.cfg.lora and self.ref_adapter is not None:
            with self._reference_adapter():
                logp, _, _ = self.forward(self.module, mb, False, with_entropy=False)
        elif self.cfg.lora:
            with self.policy.disable_adapter():
                logp, _, _ = self.forward(self.module, mb, False, with_entropy=False)
        else:
            logp, _, _ = self.forward(self.ref_module, mb, False, with_entropy=False)
        return logp

    # -- weights out (sync, checkpoints) and back in (restore) ------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint must hold to restore training: the adapter (or all weights) and the critic.

        Full tensors on CPU; under FSDP, rank 0's copy from the gather after the last optimizer step.
        """
        trainable = {n for n, p in self.policy.named_parameters() if p.requires_grad}
        sd = {f"policy.{k}": v.detach().cpu().contiguous() for k, v in self.policy_state().items() if k in trainable}
        if self.value_head is not None:
            vh = ({k[len("value_head."):]: v for k, v in self._full.items() if k.startswith("value_head.")}
                  if self.fsdp else self.value_head.state_dict())
            sd.update({f"value_head.{k}": v.detach().cpu().contiguous() for k, v in vh.items()})
        return sd

    def load_trainable_state(self, sd: dict[str, torch.Tensor]) -> None:
        """Restore ``trainable_state``'s output; under FSDP every rank calls it and keeps its slice."""
        if self.fsdp:
            fsdp.load_full_state_dict(self.module, sd)
            self.gather_full_state()
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
                                    state_dict=self.policy_state() if self.fsdp else None)
        return path

    def save_model(self, path: str) -> str:
        """The full policy in HF format (full fine-tuning), from the gathered weights under FSDP."""
        self.policy.save_pretrained(path, safe_serialization=True,
                                    state_dict=self.policy_state() if self.fsdp else None)
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
            missing, unexpected = sorted(set(params) - set(tensors))[:3], sorted(set(tensors) - set(params))[:3]
            raise KeyError(f"checkpoint: reference parameters differ from the model's: missing {missing}, "
                           f"unexpected {unexpected}")
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
        state = self.policy_state()
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


def used_width(attention_mask: torch.Tensor) -> int:
    """Columns of a right-padded (B, T) batch up to its longest row's last real token; >= 1."""
    used = attention_mask.bool().any(dim=0)  # (T,)
    if not bool(used.any()):
        return attention_mask.shape[1]
    return int(used.nonzero().max()) + 1


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


@dataclass(frozen=True)
class PromptGroups:
    """A micro-batch's rows as runs that share a prompt (GRPO groups, item-major), and the template every
    run shares: ``first`` and ``sizes`` of each run, ``ends`` (each run's first policy position) and
    ``template`` (the tokens every row holds alike before the earliest of them)."""

    first: tuple[int, ...]
    sizes: tuple[int, ...]
    ends: tuple[int, ...]
    template: int

    def row_group(self) -> list[int]:
        return [g for g, n in enumerate(self.sizes) for _ in range(n)]

    def tokens(self, lens: Sequence[int]) -> int:
        """Positions the grouped forward runs for rows of real lengths ``lens``."""
        w2 = max(e - 1 - self.template for e in self.ends)
        w3 = max(int(n) - (self.ends[g] - 1) for n, g in zip(lens, self.row_group()))
        return self.template + len(self.first) * max(w2, 0) + len(lens) * w3


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  loss_mask: torch.Tensor) -> PromptGroups | None:
    """The micro-batch's prompt groups when a grouped forward runs fewer positions than the one-prefix forward
    (``_PolicyWithValue``), else None: at least two runs of rows with one prompt each (a row's prompt is
    everything before its first policy token) and a template of at least ``MIN_SHARED_PREFIX`` tokens."""
    B, T = input_ids.shape
    if B < 2:
        return None
    has = loss_mask.bool()
    starts = torch.where(has.any(dim=1), has.float().argmax(dim=1), torch.full((B,), T)).tolist()
    first, sizes, ends = [], [], []
    b = 0
    while b < B:
        end, e = max(1, int(starts[b])), b + 1
        while e < B and int(starts[e]) == end and torch.equal(input_ids[e, :end], input_ids[b, :end]):
            e += 1
        first.append(b), sizes.append(e - b), ends.append(end)
        b = e
    if len(first) < 2:
        return None
    template = common_prefix_length(input_ids, attention_mask, min(ends) - 1)
    if template < MIN_SHARED_PREFIX:
        return None
    groups = PromptGroups(tuple(first), tuple(sizes), tuple(ends), template)
    start = first_policy_position(loss_mask)
    shared = common_prefix_length(input_ids, attention_mask, start - 1)
    lens = attention_mask.sum(dim=1).tolist()
    one_prefix = shared + B * (used_width(attention_mask) - shared)
    return groups if groups.tokens(lens) < one_prefix else None


class SharedTemplate:
    """An update's shared template run once: its KV cache as leaf tensors that each micro-batch's passes start
    from, and the graph that made them.

    Every row of a Router-R1 batch starts with the same rules and candidate list, most of a RouterBench
    prompt. Run per micro-batch, they cost each micro-batch those positions forward and backward. Here they run once an update: each micro-batch's backward leaves its share of the gradient on
    the leaves (``keys``, ``values``), and ``backward`` sends their sum through the template's graph once.
    The gradients are the same as running the template in every micro-batch (tests/learner/test_learner.py).
    """

    def __init__(self, ids: torch.Tensor, cache: Any):
        # ids: (L,) the template's tokens; cache: the DynamicCache its forward built (batch 1)
        self.ids = ids
        self.length = int(ids.shape[0])
        self._made = [(layer.keys, layer.values) for layer in cache.layers]  # each (1, heads, L, d)
        grad = torch.is_grad_enabled()
        self.leaves = [(k.detach().requires_grad_(grad), v.detach().requires_grad_(grad)) for k, v in self._made]

    def matches(self, input_ids: torch.Tensor) -> bool:
        """Whether every row of ``input_ids`` (B, T) starts with this template."""
        if input_ids.shape[1] < self.length:
            return False
        return bool((input_ids[:, :self.length] == self.ids.to(input_ids.device)).all())

    def cache(self) -> Any:
        """A fresh KV cache (batch 1) holding the template: passes append to it without touching the leaves."""
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=self.leaves)

    def backward(self) -> None:
        """The micro-batches' gradients on the template's KV cache, back through its forward (once)."""
        outs, grads = [], []
        for made, leaf in zip(self._made, self.leaves):
            for m, lf in zip(made, leaf):
                if lf.grad is not None and m.requires_grad:
                    outs.append(m), grads.append(lf.grad)
        if outs:
            torch.autograd.backward(outs, grads)
        self._made, self.leaves = [], []  # the graph is spent


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
        self.trained_tokens = 0
        """Token positions run by forward passes with gradients (the shared prefix once), for the learner's
        ``learner/tokens``: what its FLOPs scale with."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_values: bool,
                start: int = 1, groups: "PromptGroups | None" = None,
                template: SharedTemplate | None = None) -> dict:
        with torch.autocast(input_ids.device.type, dtype=self.autocast or torch.float32,
                            enabled=self.autocast is not None):
            if template is not None and not template.matches(input_ids):
                raise ValueError("learner: a micro-batch that does not start with its batch's shared template")
            if groups is not None:  # the caller's choice (LearnerModel.forward: never where sharing is off)
                return self._grouped_forward(input_ids, attention_mask, with_values, groups, template)
            return self._forward(input_ids, attention_mask, with_values, start, template)

    def run_template(self, ids: torch.Tensor) -> SharedTemplate:
        """The template ``ids`` (L,) run once (``SharedTemplate``); counted in ``trained_tokens`` with gradients."""
        with torch.autocast(ids.device.type, dtype=self.autocast or torch.float32, enabled=self.autocast is not None):
            head = self.policy(input_ids=ids[None], use_cache=True, logits_to_keep=1)
        if torch.is_grad_enabled():
            self.trained_tokens += int(ids.shape[0])
        return SharedTemplate(ids, head.past_key_values)

    def _prefix_cache(self, ids: torch.Tensor, length: int, template: SharedTemplate | None) -> tuple[Any, int]:
        """A KV cache (batch 1) of ``ids[:length]`` (ids: (T,)), from the template's when given: the cache and
        the positions run to make it."""
        if template is None:
            return self.policy(input_ids=ids[None, :length], use_cache=True, logits_to_keep=1).past_key_values, length
        cache = template.cache()
        if length > template.length:
            self.policy(input_ids=ids[None, template.length:length], past_key_values=cache, use_cache=True,
                        logits_to_keep=1)
        return cache, max(0, length - template.length)

    def _grouped_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_values: bool,
                         groups: "PromptGroups", template: SharedTemplate | None = None) -> dict:
        """Several GRPO groups in one micro-batch, in three passes down a tree of KV caches: the template the
        groups share (once), each group's own prompt (once per group), each row's own tokens. Returns
        ``logits`` (B, W, V) of each row's own window, ``offsets`` (B,): row b's logits start at position
        ``offsets[b]`` (its group's last prompt token). Positions are explicit, so a shorter group's padding
        between its prompt and its rows' tokens is masked out, never seen."""
        # input_ids, attention_mask: (B, T), right-padded
        hidden = with_values and self.value_head is not None
        dev = input_ids.device
        B, P0, G = input_ids.shape[0], groups.template, len(groups.first)
        row_group = torch.tensor(groups.row_group(), device=dev)  # (B,)
        if template is not None:
            P0 = max(P0, template.length)  # every row starts with the batch's template
        cache, run = self._prefix_cache(input_ids[0], P0, template)
        ends = [e - 1 for e in groups.ends]  # each group's prompt up to its last token, which starts the rows
        w2 = max(e - P0 for e in ends)
        if w2 > 0:
            cache.batch_repeat_interleave(G)  # (1, ...) -> (G, ...)
            seg = torch.zeros(G, w2, dtype=input_ids.dtype, device=dev)
            m2 = torch.zeros(G, w2, dtype=attention_mask.dtype, device=dev)
            for g, (first, e) in enumerate(zip(groups.first, ends)):
                seg[g, :e - P0], m2[g, :e - P0] = input_ids[first, P0:e], 1
            prev = torch.cat([torch.ones(G, P0, dtype=m2.dtype, device=dev), m2], dim=1)  # (G, P0 + w2)
            pos = (P0 + torch.arange(w2, device=dev)).expand(G, w2)
            self.policy(input_ids=seg, attention_mask=prev, position_ids=pos, past_key_values=cache, use_cache=True,
                        logits_to_keep=1)
            cache.reorder_cache(row_group)  # (G, ...) -> (B, ...): each row its group's cache
            prev = prev[row_group]
            run += G * w2
        else:
            cache.batch_repeat_interleave(B)
            prev = torch.ones(B, P0, dtype=attention_mask.dtype, device=dev)
        lens = attention_mask.sum(dim=1).tolist()
        offsets = [ends[g] for g in groups.row_group()]
        w3 = max(int(n) - o for n, o in zip(lens, offsets))
        seg = torch.zeros(B, w3, dtype=input_ids.dtype, device=dev)
        m3 = torch.zeros(B, w3, dtype=attention_mask.dtype, device=dev)
        for b, (n, o) in enumerate(zip(lens, offsets)):
            seg[b, :int(n) - o], m3[b, :int(n) - o] = input_ids[b, o:int(n)], 1
        off = torch.tensor(offsets, device=dev)
        pos = off[:, None] + torch.arange(w3, device=dev)[None, :]
        out = self.policy(input_ids=seg, attention_mask=torch.cat([prev, m3], dim=1), position_ids=pos,
                          past_key_values=cache, use_cache=True, output_hidden_states=hidden)
        run += B * w3
        if torch.is_grad_enabled():
            self.trained_tokens += int(run)
        res = {"logits": out.logits, "offsets": off}  # (B, w3, V), (B,)
        if hidden:
            res["values"] = self.value_head(out.hidden_states[-1])  # (B, w3)
        return res

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_values: bool,
                 start: int, template: SharedTemplate | None = None) -> dict:
        # input_ids, attention_mask: (B, T); W = T - start + 1 positions come back
        hidden = with_values and self.value_head is not None
        window = input_ids.shape[1] - start + 1  # W
        prefix = common_prefix_length(input_ids, attention_mask, start - 1)
        if template is not None:
            prefix = max(prefix, template.length)  # every row starts with the batch's template (a row alone too)
        if prefix >= MIN_SHARED_PREFIX and (self.share_prefix_in_training or not self.training):
            cache, run = self._prefix_cache(input_ids[0], prefix, template)
            cache.batch_repeat_interleave(input_ids.shape[0])  # (1, ...) -> (B, ...), grads flow to row 0
            out = self.policy(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, past_key_values=cache,
                              use_cache=True, logits_to_keep=window, output_hidden_states=hidden)
            run += input_ids.shape[0] * (input_ids.shape[1] - prefix)
        else:
            out = self.policy(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=window,
                              output_hidden_states=hidden)
            run = input_ids.numel()
        if torch.is_grad_enabled():
            self.trained_tokens += int(run)
        res = {"logits": out.logits}  # (B, W, V)
        if hidden:
            res["values"] = self.value_head(out.hidden_states[-1][:, -window:])  # (B, W)
        return res
