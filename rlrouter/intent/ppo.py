"""PPO fine-tuning of the intent classifier (Schulman et al., 2017, "Proximal Policy Optimization"),
written top to bottom in CleanRL's style and names.

The MDP: a state is a query, the action is a label sampled from the classifier's softmax
(the policy), the reward comes from a reward function of the project's contract
``fn(prompts, completions, **columns) -> list[float | None]`` with the predicted label as completion and
the columns ``labels`` (gold) and ``confidences`` (the policy's probability of the chosen label),
the columns ``rlrouter.rewards.classification`` reads.

Queries arrive as a stream; ``episode_length`` consecutive queries form one episode. The default is 1:
a predicted label never changes which query comes next, so each query is its own episode and GAE
reduces to ``r - V(s)``. Longer episodes model a session (a per-batch reward such as F1 is then shared
by the episode) and make γ and λ matter. A value head on the detached pooled features gives the
baseline; the loss is the clipped surrogate + ``vf_coef`` · value loss − ``ent_coef`` · entropy.

Both rollouts and updates run in eval mode: dropout off, so the ratio is exactly 1 at the first
minibatch and the clip measures policy change, not dropout noise.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.distributions import Categorical

from rlrouter.intent.data import IntentExample
from rlrouter.distributed.launcher import all_reduce_sum, rank_and_world, rank_shard, unwrap, wrap_ddp
from rlrouter.intent.model import IntentModel

RewardFn = Callable[..., list[float | None]]


@dataclass
class IntentPPOConfig:
    """The PPO phase. The first six fields mirror the intent quick-start's ``rl_training`` block."""

    learning_rate: float = 1e-5
    """Adam step for the LoRA adapter and the classification head (the intent quick-start's default)."""
    gamma: float = 0.99
    """Discount inside an episode of ``episode_length`` queries."""
    batch_size: int = 64
    """Queries per rollout on each worker."""
    update_epochs: int = 4
    """PPO passes over each rollout."""
    reward_metric: Any = "accuracy"
    """Reward: a name of rlrouter.rewards.classification, 'pkg.mod:fn', or a list of {metric, weight}."""
    gae_lambda: float = 0.95
    """GAE λ: bias/variance trade-off of the advantage estimate (Schulman et al., 2016)."""
    minibatch_size: int = 16
    """Queries per gradient step; batch_size must be a multiple."""
    clip_coef: float = 0.2
    """ε of the clipped surrogate."""
    ent_coef: float = 0.01
    """Entropy bonus: keeps the softmax from collapsing before the reward has been explored."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    value_learning_rate: float = 1e-3
    """The value head starts from scratch, unlike the policy, so it gets its own larger step."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    target_kl: float | None = None
    """Stop the update epochs of a rollout early once approx_kl passes this; None = never."""
    episode_length: int = 1
    """Queries per episode (see the module docstring); batch_size must be a multiple."""
    iterations: int = 10
    """Rollouts (each followed by update_epochs passes)."""
    eval_every: int = 0
    """Evaluate the greedy policy on validation every N iterations; 0 = only before and after."""
    select_best: bool = False
    """Keep the iteration with the best validation reward instead of the last (starting point included)."""

    def __post_init__(self) -> None:
        positive_ints = ("batch_size", "update_epochs", "minibatch_size", "episode_length", "iterations")
        for name in positive_ints:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("learning_rate", "value_learning_rate", "clip_coef", "max_grad_norm"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        for name in ("ent_coef", "vf_coef"):
            if float(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.batch_size % self.minibatch_size:
            raise ValueError(f"minibatch_size: {self.minibatch_size} does not divide batch_size {self.batch_size}")
        if self.batch_size % self.episode_length:
            raise ValueError(f"episode_length: {self.episode_length} does not divide batch_size {self.batch_size}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every: must be >= 0, got {self.eval_every}")
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"target_kl: must be > 0 or null, got {self.target_kl}")


# ---------------------------------------------------------------- advantages


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: float,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over one rollout (Schulman et al., 2016, eq. 16).

    rewards, values, dones: (T,). ``dones[t] = 1`` when the episode ends after step t (nothing is
    bootstrapped across it). ``last_value`` is V of the state after the rollout, used only when the
    last step is not terminal. Returns (advantages, returns), both (T,), returns = advantages + values.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(T)):
        nextnonterminal = 1.0 - float(dones[t])
        nextvalue = last_value if t == T - 1 else values[t + 1]
        delta = rewards[t] + gamma * nextvalue * nextnonterminal - values[t]
        lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


@dataclass
class RolloutBuffer:
    """One rollout of T queries: the tokenized states and what the behaviour policy did there."""

    texts: list[str]
    input_ids: torch.Tensor  # (T, S)
    attention_mask: torch.Tensor  # (T, S)
    actions: torch.Tensor  # (T,) label ids
    logprobs: torch.Tensor  # (T,) log π_old(a|s)
    values: torch.Tensor  # (T,) V_old(s)
    rewards: torch.Tensor  # (T,)
    dones: torch.Tensor  # (T,)
    advantages: torch.Tensor = field(default_factory=lambda: torch.empty(0))  # (T,)
    returns: torch.Tensor = field(default_factory=lambda: torch.empty(0))  # (T,)

    def __post_init__(self) -> None:
        T = len(self.texts)
        for name in ("input_ids", "attention_mask", "actions", "logprobs", "values", "rewards", "dones"):
            if getattr(self, name).shape[0] != T:
                raise ValueError(f"{name}: has {getattr(self, name).shape[0]} rows for {T} texts")

    def finish(self, gamma: float, gae_lambda: float, last_value: float = 0.0) -> None:
        self.advantages, self.returns = compute_gae(self.rewards, self.values, self.dones, last_value,
                                                    gamma, gae_lambda)

    def minibatch(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows ``idx``, cut to the longest query among them (padding is on the right)."""
        mask = self.attention_mask[idx]
        width = int(mask.sum(1).max())
        return {"input_ids": self.input_ids[idx][:, :width], "attention_mask": mask[:, :width]}


def episode_dones(T: int, episode_length: int) -> torch.Tensor:
    """(T,) with 1 after every ``episode_length``-th query."""
    return ((torch.arange(T) + 1) % episode_length == 0).float()


# ---------------------------------------------------------------- losses


@dataclass
class PPOLosses:
    loss: torch.Tensor
    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clipfrac: torch.Tensor


def ppo_losses(logits: torch.Tensor, new_values: torch.Tensor, actions: torch.Tensor,
               old_logprobs: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
               clip_coef: float, ent_coef: float, vf_coef: float, norm_adv: bool) -> PPOLosses:
    """Clipped surrogate + value loss − entropy bonus. logits (B, L); the rest (B,)."""
    dist = Categorical(logits=logits)
    newlogprob = dist.log_prob(actions)  # (B,)
    entropy = dist.entropy().mean()
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()
    with torch.no_grad():
        # the low-variance estimator of KL(old || new) (Schulman, "Approximating KL divergence")
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    loss = pg_loss - ent_coef * entropy + vf_coef * v_loss
    return PPOLosses(loss, pg_loss, v_loss, entropy, approx_kl, clipfrac)


# ---------------------------------------------------------------- rollout


def score(reward_fn: RewardFn, texts: Sequence[str], predicted: Sequence[str], gold: Sequence[str],
          confidence: Sequence[float]) -> list[float | None]:
    """Call a reward function with the classification columns of the contract."""
    values = reward_fn(list(texts), list(predicted), labels=list(gold), confidences=[float(c) for c in confidence])
    if len(values) != len(texts):
        raise ValueError(f"reward returned {len(values)} values for {len(texts)} queries")
    return list(values)


def _to_rewards(values: Sequence[float | None]) -> tuple[torch.Tensor, int]:
    """None (not applicable) gives no signal: reward 0, counted so the log shows how often."""
    n_none = sum(v is None for v in values)
    return torch.tensor([0.0 if v is None else float(v) for v in values], dtype=torch.float32), n_none


@torch.no_grad()
def collect_rollout(model: IntentModel, examples: Sequence[IntentExample], reward_fn: RewardFn,
                    cfg: IntentPPOConfig, generator: torch.Generator) -> tuple[RolloutBuffer, dict[str, float]]:
    """Sample ``cfg.batch_size`` queries, act with the current policy, score, and run GAE."""
    idx = torch.randint(len(examples), (cfg.batch_size,), generator=generator)
    batch = [examples[i] for i in idx.tolist()]
    texts = [e.text for e in batch]
    enc = model.tokenize(texts)
    out = model(**enc)
    dist = Categorical(logits=out.logits)
    actions = _sample(out.logits, generator)  # (T,) exploration: sampled, not argmax
    logprobs = dist.log_prob(actions)
    probs = logprobs.exp()
    predicted = [model.labels[a] for a in actions.tolist()]
    raw = score(reward_fn, texts, predicted, [e.label for e in batch], probs.tolist())
    rewards, n_none = _to_rewards(raw)
    dev = out.values.device  # the buffer lives with the model (the rank's device)
    buf = RolloutBuffer(texts=texts, input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                        actions=actions, logprobs=logprobs, values=out.values.float(), rewards=rewards.to(dev),
                        dones=episode_dones(len(texts), cfg.episode_length).to(dev))
    # the rollout ends on an episode boundary (validated), so nothing is bootstrapped past it
    buf.finish(cfg.gamma, cfg.gae_lambda, last_value=0.0)
    correct = sum(p == e.label for p, e in zip(predicted, batch))
    stats = {"reward_sum": float(rewards.sum()), "none": float(n_none), "correct": float(correct),
             "n": float(len(texts)), "entropy_sum": float(dist.entropy().sum()),
             "value_sum": float(out.values.sum())}
    return buf, stats


def _sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Categorical sample with an explicit (CPU) generator: reproducible rollouts, the same on any device."""
    probs = torch.softmax(logits.float(), dim=-1).cpu()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(logits.device)


@torch.no_grad()
def greedy_eval(model: IntentModel, examples: Sequence[IntentExample], reward_fn: RewardFn,
                batch_size: int = 64) -> dict[str, float]:
    """Greedy (argmax) policy on ``examples`` of this rank, summed for an all-reduce."""
    reward_sum = n_scored = correct = 0.0
    for i in range(0, len(examples), batch_size):
        batch = list(examples[i:i + batch_size])
        texts = [e.text for e in batch]
        probs = torch.softmax(model(**model.tokenize(texts)).logits.float(), dim=-1)
        conf, idx = probs.max(-1)
        predicted = [model.labels[a] for a in idx.tolist()]
        raw = score(reward_fn, texts, predicted, [e.label for e in batch], conf.tolist())
        reward_sum += sum(v for v in raw if v is not None)
        n_scored += sum(v is not None for v in raw)
        correct += sum(p == e.label for p, e in zip(predicted, batch))
    return {"reward_sum": reward_sum, "n_scored": n_scored, "correct": correct, "n": float(len(examples))}


def _val_metrics(model: IntentModel, val: Sequence[IntentExample], reward_fn: RewardFn) -> dict[str, float]:
    s = greedy_eval(model, val, reward_fn)
    reward_sum, n_scored, correct, n = all_reduce_sum([s["reward_sum"], s["n_scored"], s["correct"], s["n"]])
    return {"val/reward": reward_sum / n_scored if n_scored else math.nan, "val/accuracy": correct / max(n, 1)}


# ---------------------------------------------------------------- training loop


@dataclass
class PPOResult:
    history: list[dict[str, float]]
    best_iteration: int
    val_start: dict[str, float]
    val_end: dict[str, float]


def train_ppo(model: IntentModel, train: Sequence[IntentExample], val: Sequence[IntentExample],
              reward_fn: RewardFn, cfg: IntentPPOConfig, seed: int = 0,
              log: Callable[[dict[str, float]], None] | None = None) -> PPOResult:
    """Run ``cfg.iterations`` rollouts of PPO on ``model`` in place. Works on one process or as one rank
    of a torch.distributed group (Ray Train): each rank rolls out on its shard, DDP averages gradients."""
    rank, world = rank_and_world()
    train_shard = rank_shard(train, rank, world)
    val_shard = rank_shard(val, rank, world) if len(val) >= world else list(val)
    model.set_value_head_trainable(True)
    model.eval()  # see the module docstring: no dropout in rollouts or updates
    net = wrap_ddp(model)
    policy_params = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("value_head.")]
    optimizer = torch.optim.Adam([
        {"params": policy_params, "lr": cfg.learning_rate},
        {"params": list(model.value_head.parameters()), "lr": cfg.value_learning_rate},
    ], eps=1e-5)
    params = policy_params + list(model.value_head.parameters())
    generator = torch.Generator().manual_seed(seed * 1000 + rank)

    val_start = _val_metrics(model, val_shard, reward_fn)
    best_score, best_iter, best_state = val_start["val/reward"], 0, model.trainable_state()
    history: list[dict[str, float]] = []
    val_now = val_start
    for it in range(1, cfg.iterations + 1):
        t0 = time.perf_counter()
        buf, st = collect_rollout(model, train_shard, reward_fn, cfg, generator)
        sums: dict[str, float] = {"pg_loss": 0.0, "v_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0,
                                  "clipfrac": 0.0, "steps": 0.0}
        T = len(buf.texts)
        for epoch in range(cfg.update_epochs):
            perm = torch.randperm(T, generator=generator)
            epoch_kl = 0.0
            for start in range(0, T, cfg.minibatch_size):
                idx = perm[start:start + cfg.minibatch_size]
                out = net(**buf.minibatch(idx))
                losses = ppo_losses(out.logits, out.values, buf.actions[idx], buf.logprobs[idx],
                                    buf.advantages[idx], buf.returns[idx], cfg.clip_coef, cfg.ent_coef,
                                    cfg.vf_coef, cfg.norm_adv)
                optimizer.zero_grad(set_to_none=True)
                losses.loss.backward()
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
                for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac"):
                    sums[k] += float(torch.as_tensor(getattr(losses, k)).detach())  # logged, not differentiated
                sums["steps"] += 1
                epoch_kl += float(losses.approx_kl)
            if cfg.target_kl is not None:
                # every rank must take the same decision or DDP's all-reduce waits forever
                kl = all_reduce_sum([epoch_kl / max(1, T // cfg.minibatch_size)])[0] / world
                if kl > cfg.target_kl:
                    break
        keys = ["reward_sum", "none", "correct", "n", "entropy_sum", "value_sum"]
        r = dict(zip(keys, all_reduce_sum([st[k] for k in keys])))
        l = dict(zip(sums, all_reduce_sum(list(sums.values()))))
        steps = max(l["steps"], 1.0)
        row = {
            "iteration": float(it),
            "reward/mean": r["reward_sum"] / r["n"],
            "reward/none_frac": r["none"] / r["n"],
            "rollout/accuracy": r["correct"] / r["n"],
            "rollout/entropy": r["entropy_sum"] / r["n"],
            "rollout/value_mean": r["value_sum"] / r["n"],
            "learner/pg_loss": l["pg_loss"] / steps,
            "learner/v_loss": l["v_loss"] / steps,
            "learner/entropy": l["entropy"] / steps,
            "learner/approx_kl": l["approx_kl"] / steps,
            "learner/clipfrac": l["clipfrac"] / steps,
            "time/iteration_s": time.perf_counter() - t0,
        }
        if (cfg.eval_every and it % cfg.eval_every == 0) or it == cfg.iterations:
            val_now = _val_metrics(model, val_shard, reward_fn)
            row.update(val_now)
            if cfg.select_best and val_now["val/reward"] > best_score:
                best_score, best_iter, best_state = val_now["val/reward"], it, model.trainable_state()
        history.append(row)
        if log is not None:
            log(row)
    if cfg.select_best:
        unwrap(net).load_state_dict(best_state, strict=False)
    else:
        best_iter = cfg.iterations
    model.set_value_head_trainable(False)
    return PPOResult(history=history, best_iteration=best_iter, val_start=val_start, val_end=val_now)
