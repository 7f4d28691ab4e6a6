"""The config of a Router-R1 training run (``RouterR1TrainConfig``) and of its learner ranks (``LearnerConfig``).

The trainer (``rlrouter.trainer.router_r1``) drives the run with it, and every learner rank is built from
it (``rlrouter.learner.group``): it crosses the Ray boundary as a dict and is rebuilt on each rank. So it
lives here, below both, and below the learner's model and update parts, which both read ``LearnerConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rlrouter.algos.registry import get_adv_estimator, get_algo_config, get_policy_loss
from rlrouter.rewards.spec import RewardSpec

SYNC_TRANSPORTS = ("lora", "tensors", "nccl")


@dataclass
class LearnerConfig:
    """The policy update. Defaults suit SmolLM2-135M with LoRA on CPU."""

    model: str = "smollm2-135m-instruct"
    algo: str = "grpo"
    """A registered algorithm (``rlrouter.algos.registry``): "grpo" (group-normalised advantages, no
    critic) or "ppo" (critic + GAE). Its knobs are ``learner.<algo>``."""
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
    share_template: bool = True
    """Run the tokens every row of an update's batch shares (Router-R1's rules and candidate list) once an
    update, forward and backward, instead of once per micro-batch (``model.SharedTemplate``): the same
    gradients. On one rank without gradient checkpointing or FSDP; elsewhere each micro-batch runs it."""
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
    "base" after a cold start, the KL pulls toward a policy that never learned the format."""
    tis_cap: float | None = None
    """Rollout correction (truncated importance sampling, as verl's and OpenRLHF's): weight each policy
    token's loss by min(pi_learner / pi_engine, tis_cap), the engine being the vLLM that sampled it.
    None: off. The mismatch it corrects is logged every step as ``rollout/logprob_gap``."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward: activation memory of ~one layer, ~1.3x compute."""
    keep_checkpoints: int = 0
    """How many of the newest checkpoints stay on disk (a 3B full fine-tune's is ~46 GiB); 0 keeps all."""
    grpo: dict[str, Any] = field(default_factory=dict)
    """``GRPOConfig``'s knobs (``conf/algo/grpo.yaml``); the group size comes from ``train.n_samples``."""
    ppo: dict[str, Any] = field(default_factory=dict)
    """``PPOConfig``'s knobs (``conf/algo/ppo.yaml``)."""

    def __post_init__(self) -> None:
        algo = self.algo_cfg  # an unknown algo, estimator or loss fails here, naming what is registered
        get_adv_estimator(algo.adv_estimator)
        get_policy_loss(algo.policy_loss)
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
    def algo_cfg(self) -> Any:
        """The registered config of ``algo`` (``GRPOConfig``, ``PPOConfig``), built from ``learner.<algo>``."""
        return get_algo_config(self.algo)(**(getattr(self, self.algo, None) or {}))


@dataclass
class RouterR1TrainConfig:
    """One Router-R1 training run: what the trainer drives and what every learner rank is built from."""

    total_steps: int = 10
    """RL steps; 0 = the cold start only, saved as checkpoints/step_000000 (a start for ``init_from``)."""
    prompts_per_step: int = 8
    """Prompts per step across all learner ranks (Router-R1: batch 64)."""
    n_samples: int = 4
    """Trajectories per prompt (GRPO's group size; 1 is plain PPO)."""
    filter_groups: int = 0
    """DAPO's dynamic sampling (verl: ``algorithm.filter_groups``): a group whose samples all score the same
    has zero advantage and teaches nothing but the KL term; up to this many more batches of prompts are
    drawn and rolled out per step to replace such groups. 0 = off (every drawn group is learned on). The
    extra batches are scored like any (with ``cost_bounds: null`` their costs enter the cost window). Needs
    ``n_samples`` >= 2: one sample is no group to compare."""
    rollout_dump: bool = False
    """Write each step's sampled trajectories (question, stratum, reward parts, format failure, calls, text)
    to ``<out_dir>/rollouts/step_NNNNNN.jsonl`` (verl: ``trainer.rollout_data_dir``); about 3 KB a
    trajectory."""
    seed: int = 0
    reward: dict[str, Any] = field(default_factory=lambda: {"name": "router_r1", "alpha": 0.3})
    """The reward (``conf/reward/``), built by ``rlrouter.rewards.registry``: ``router_r1`` alone or
    ``combined`` with others (e.g. ``tool_budget``); the candidates are filled in from the pool."""
    checkpoint_every: int = 5
    """K: a checkpoint every K steps (and at the end)."""
    sync: str = "tensors"
    """Weight-sync transport: "lora" (adapter files) or "tensors" (merged tensors in buckets), both
    through the object store; or "nccl": GPU to GPU from the learner's rank 0 into the engines
    (``rlrouter.sync.nccl``; on CPU the same transfer over gloo; the job starts the engines with
    ``weight_transfer: nccl``)."""
    sync_bucket_mb: float = 64.0
    sync_timeout_s: float = 600.0
    """``sync: nccl``: the longest a transfer may take (group setup or one sync). A rollout engine that dies
    mid-transfer would leave learner rank 0 waiting in NCCL for ever; past this (or as soon as a receiver's
    call fails) the transfer group is aborted and the sync fails with an error naming the worker."""
    train_path: str = ""
    out_dir: str = "outputs/run"
    checkpoint_dir: str = ""
    """Where the learner ranks store checkpoints, from whichever node they run on: a path every learner
    node sees or a URI (``s3://``, ``file://``; the job sets ``<storage>/<run_name>/checkpoints``).
    Empty: ``<out_dir>/checkpoints``."""
    resume_from: str | None = None
    """A checkpoint directory to continue from (``resume=true`` points it at the run's latest)."""
    init_from: str | None = None
    """A checkpoint whose policy weights start this run (optimizer and step fresh, no cold start): RL
    arms that share one saved cold start (``total_steps=0``)."""
    progress: bool = True
    """A progress bar for the cold start and RL (plain step lines when stdout is not a terminal)."""
    warmup_steps: int = 0
    """Cold-start supervised steps on demonstrations before RL (``rlrouter.rollout.demos``); 0 = none."""
    warmup_batch: int = 8
    warmup_lr: float | None = None
    """Learning rate of the cold start (None: the learner's)."""
    eval_every: int = 0
    """Held-out greedy evaluation every K RL steps, and once after the cold start (logged at step 0 as
    ``eval/...``): the curve that shows whether RL improves on the cold start. 0 = off."""
    eval_seed: int = 1234
    eval_reference: dict[str, Any] | None = None
    """The held-out scoring's reference (set by the job, ``rlrouter.eval.route_scores``): ``cost_bounds``,
    the sqrt-cost scale of every candidate's call on the training questions, and ``strong``, the strong
    candidate. None: each evaluation scales its own costs."""
    learner: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("total_steps", "prompts_per_step", "n_samples", "checkpoint_every"):
            low = 0 if f == "total_steps" else 1
            if not isinstance(getattr(self, f), int) or getattr(self, f) < low:
                raise ValueError(f"train.{f}: must be an int >= {low}, got {getattr(self, f)!r}")
        if not isinstance(self.filter_groups, int) or self.filter_groups < 0:
            raise ValueError(f"train.filter_groups: an int >= 0 (0 = off), got {self.filter_groups!r}")
        if self.filter_groups and self.n_samples < 2:
            raise ValueError(f"train.filter_groups={self.filter_groups} needs train.n_samples >= 2 (groups to "
                             f"compare), got n_samples={self.n_samples}")
        if not isinstance(self.rollout_dump, bool):
            raise ValueError(f"train.rollout_dump: true or false, got {self.rollout_dump!r}")
        if self.sync not in SYNC_TRANSPORTS:
            raise ValueError(f"train.sync: one of {SYNC_TRANSPORTS}, got {self.sync!r}")
        if not self.sync_timeout_s > 0:
            raise ValueError(f"train.sync_timeout_s: must be > 0, got {self.sync_timeout_s!r}")

    @property
    def reward_spec(self) -> RewardSpec:
        """The reward's settings (alpha, cost window, metric) that the training reward and every evaluation of
        the run score with (``rlrouter.rewards.spec``)."""
        return RewardSpec.from_reward(self.reward)

    @property
    def checkpoints(self) -> str:
        """The checkpoint folder or URI (``checkpoint_dir``, else ``<out_dir>/checkpoints``)."""
        return self.checkpoint_dir or str(Path(self.out_dir) / "checkpoints")

    @property
    def learner_cfg(self) -> LearnerConfig:
        """The learner's config. An algorithm that normalises within each prompt's samples (one with a
        ``group_size``: GRPO) takes ``train.n_samples`` as its group size, so the quantity is written once."""
        learner = dict(self.learner)
        algo = learner.get("algo", LearnerConfig.algo)
        if "group_size" in {f.name for f in fields(get_algo_config(algo))}:
            knobs = dict(learner.get(algo) or {})
            if knobs.setdefault("group_size", self.n_samples) != self.n_samples:
                raise ValueError(f"learner.{algo}.group_size={knobs['group_size']} must equal train.n_samples="
                                 f"{self.n_samples}: GRPO normalises within each prompt's samples")
            learner[algo] = knobs
        return LearnerConfig(**learner)
