"""The Router-R1 training loop, owned by the driver: rollout -> reward -> update -> sync (issues 3, 13).

``run_training`` reads top to bottom, as verl's ``RayPPOTrainer.fit`` does. The driver draws the
step's prompts (a pure function of seed and step: the data cursor), rolls them out through the
``RolloutGroup``, scores them, hands each learner rank its shard in ONE ``train_step`` call
(the ranks keep model, optimizer and DDP state; DDP averages the gradients), takes the new
weights from rank 0 and syncs the rollout workers. Rollout workers are driven by nobody else.

``learners`` is a ``LearnerGroup`` (Ray Train ranks) or ``LocalLearners`` (this process, no Ray);
``rollout`` is a ``RolloutGroup`` or a ``LocalRollout``. If the learner ranks restart (a rank died,
Ray Train ``FailureConfig``), the loop resumes from the checkpoint they restored.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from rlrouter.learner.learner import LearnerConfig
from rlrouter.progress import Progress
from rlrouter.rewards.router_r1 import router_r1_part, score_trajectories
from rlrouter.rollout.env import Trajectory
from rlrouter.sync.transports import SyncPayload

log = logging.getLogger(__name__)


SYNC_TRANSPORTS = ("lora", "tensors", "nccl")


@dataclass
class TrainConfig:
    """One Router-R1 training run."""

    total_steps: int = 10
    """RL steps; 0 = the cold start only, saved as checkpoints/step_000000 (a start for ``init_from``)."""
    prompts_per_step: int = 8
    """Prompts per step across all learner ranks (Router-R1: batch 64)."""
    n_samples: int = 4
    """Trajectories per prompt (GRPO's group size; 1 is plain PPO)."""
    seed: int = 0
    reward: dict[str, Any] = field(default_factory=lambda: {"name": "router_r1", "alpha": 0.3})
    """The reward (``conf/reward/``), built by ``rlrouter.rewards.registry``: ``router_r1`` alone or
    ``combined`` with others (e.g. ``tool_budget``); the candidates are filled in from the pool."""
    checkpoint_every: int = 5
    """K: a checkpoint every K steps (and at the end)."""
    sync: str = "tensors"
    """Weight-sync transport: "lora" (adapter files) or "tensors" (merged tensors in buckets), both
    through the object store; or "nccl": GPU to GPU from the learner's rank 0 into the engines
    (``rlrouter.sync.nccl``; CUDA only, the job starts the engines with ``weight_transfer: nccl``)."""
    sync_bucket_mb: float = 64.0
    train_path: str = ""
    out_dir: str = "outputs/run"
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
        if self.sync not in SYNC_TRANSPORTS:
            raise ValueError(f"train.sync: one of {SYNC_TRANSPORTS}, got {self.sync!r}")

    @property
    def learner_cfg(self) -> LearnerConfig:
        """The learner's config; GRPO's group size is derived here from ``n_samples`` (one place)."""
        learner = dict(self.learner)
        if learner.get("algo", "grpo") == "grpo":
            grpo = dict(learner.get("grpo") or {})
            if grpo.setdefault("group_size", self.n_samples) != self.n_samples:
                raise ValueError(f"learner.grpo.group_size={grpo['group_size']} must equal train.n_samples="
                                 f"{self.n_samples}: GRPO normalises within each prompt's samples")
            learner["grpo"] = grpo
        return LearnerConfig(**learner)


class Rollout(Protocol):
    def rollout(self, items: Sequence[dict], n_samples: int, seed: int, step: int) -> list[Trajectory]: ...

    def sync(self, payload: SyncPayload) -> float: ...


def sync_policy(cfg: TrainConfig, learners: Any, rollout: Any) -> float:
    """Make the rollout workers serve the learner's current weights; returns the bytes sent (to each
    worker). ``tensors`` / ``lora``: rank 0 builds a payload, the driver puts it in the object store
    (``RolloutGroup.sync``). ``nccl``: rank 0 sends the weights to the engines itself and the group
    records the version (``RolloutGroup.sync_direct``); a worker that restarts later gets the same
    version as a ``tensors`` payload."""
    if cfg.sync == "nccl":
        if not hasattr(rollout, "sync_direct"):
            raise ValueError("train.sync=nccl needs Ray rollout workers (a RolloutGroup); this rollout "
                             f"({type(rollout).__name__}) can only take 'tensors' or 'lora'")
        tp = getattr(rollout, "tensor_parallel_size", 1)
        info = rollout.sync_direct(lambda workers, epoch: learners.broadcast_weights(workers, tp, epoch),
                                   lambda: learners.sync_payload("tensors", cfg.sync_bucket_mb))
        return float(info.get("bytes", 0.0))
    payload = learners.sync_payload(cfg.sync, cfg.sync_bucket_mb)
    rollout.sync(payload)
    return float(payload.nbytes)


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """The data cursor: items of ``step``, from per-epoch seeded permutations. A pure function of step,
    so a resumed run draws exactly the batches an uninterrupted one would."""
    out: list[int] = []
    pos = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(pos, n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        take = min(batch_size - len(out), n - offset)
        out.extend(int(i) for i in perm[offset:offset + take])
        pos += take
    return out


def trajectory_metrics(trajs: Sequence[Trajectory], scores: Sequence[Any], candidates: Sequence[str]) -> dict:
    """Rollout and reward metrics of one batch (issue 3, "Metrics")."""
    n = max(1, len(trajs))
    calls = Counter(r.model for t in trajs for r in t.routes)
    total_calls = sum(calls.values())
    m = {
        "reward/total": float(np.mean([s.total for s in scores])) if scores else 0.0,
        "reward/format": float(np.mean([s.format for s in scores])) if scores else 0.0,
        "reward/outcome": float(np.mean([s.outcome for s in scores])) if scores else 0.0,
        "reward/cost": float(np.mean([s.cost for s in scores if s.cost is not None] or [0.0])),
        "rollout/format_valid": float(np.mean([s.format == 0 for s in scores])) if scores else 0.0,
        "rollout/em": float(np.mean([s.outcome >= 1.0 for s in scores])) if scores else 0.0,
        "rollout/cost_per_query": sum(t.cost for t in trajs) / n,
        "rollout/turns": sum(t.turns for t in trajs) / n,
        "rollout/calls_per_query": total_calls / n,
        "rollout/answered": sum(t.answer is not None for t in trajs) / n,
        "rollout/response_tokens": sum(t.tokens.num_policy_tokens for t in trajs) / n,
    }
    for c in candidates:
        m[f"rollout/share/{c}"] = calls.get(c, 0) / total_calls if total_calls else 0.0
    return m


def build_reward(cfg: TrainConfig, candidates: Sequence[str]) -> Any:
    """The run's reward, built through the registry, with the pool's candidates filled in."""
    from rlrouter.rewards.registry import _to_plain, build_reward as build, with_params

    filled = resolve_cost_bounds(_to_plain(cfg.reward), (cfg.eval_reference or {}).get("cost_bounds"))
    for name in ("router_r1", "router_r1_format"):  # the parts that check routes against the candidates
        filled = with_params(filled, name, candidates=list(candidates))
    reward = build(filled, "train.reward")
    router_r1_part(reward)
    return reward


def resolve_cost_bounds(reward: Any, bounds: Sequence[float] | None) -> Any:
    """The reward config with every ``cost_bounds: reference`` replaced by the reference window's bounds
    (``TrainConfig.eval_reference``). ``bounds`` ``None`` (no reference: live candidates) leaves Router-R1's
    window (``cost_bounds: null``)."""
    if isinstance(reward, list):
        return [resolve_cost_bounds(r, bounds) for r in reward]
    if not isinstance(reward, dict):
        return reward
    out = {k: resolve_cost_bounds(v, bounds) if k in ("functions", "params") else v for k, v in reward.items()}
    if out.get("cost_bounds") == "reference":
        out["cost_bounds"] = None if bounds is None else [float(bounds[0]), float(bounds[1])]
    return out


def held_out_reward(cfg: TrainConfig) -> dict[str, Any]:
    """The Router-R1 reward settings of the run (``alpha``, ``cost_window``, ``metric``), for the
    held-out evaluation (``rlrouter.eval.router_r1.held_out_summary``)."""
    from rlrouter.rewards.registry import _to_plain

    def find(c: Any) -> dict[str, Any] | None:
        c = _to_plain(c)
        if isinstance(c, (list, tuple)):
            return next((f for f in map(find, c) if f is not None), None)
        if isinstance(c, dict) and c.get("name") == "router_r1":
            return {**(c.get("params") or {}), **c}
        if isinstance(c, dict) and c.get("name") == "combined":
            return find(c.get("functions") or [])
        return None

    r = find(cfg.reward) or {}
    return {"alpha": float(r.get("alpha", 0.0)), "cost_window": int(r.get("cost_window", 512)),
            "metric": str(r.get("metric", "em")), "reference": cfg.eval_reference}


def held_out_metrics(cfg: TrainConfig, rollout: Rollout, candidates: Sequence[str],
                     eval_items: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Greedy held-out evaluation of the policy the rollout workers serve, as ``eval/...`` metrics."""
    from rlrouter.eval.router_r1 import held_out_summary

    t0 = time.perf_counter()
    trajs = rollout.rollout(list(eval_items), 1, cfg.eval_seed, -1, temperature=0.0)
    s = held_out_summary(trajs, candidates, **held_out_reward(cfg))
    if s["format_failures"]:
        log.info("held-out format failures (most common): %s", s["format_failures"])
    shares = {f"eval/strong_share/{task}": v for task, v in s.get("strong_share_by_task", {}).items()}
    return {"eval/format_valid": s["format_valid"], "eval/mean_reward": s["mean_reward"],
            "eval/accuracy": s["accuracy"], "eval/cost_per_query": s["cost_per_query"],
            "eval/calls_per_query": s["calls_per_query"], **shares, "time/eval_s": time.perf_counter() - t0}


def run_training(cfg: TrainConfig, rollout: Rollout, learners: Any, candidates: Sequence[str],
                 items: Sequence[dict[str, Any]], demos: Sequence[Any] = (),
                 eval_items: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Train the policy for ``cfg.total_steps`` steps; returns the last step's metrics."""
    from rlrouter.distributed.commanded import WorkersRestarted

    restarts = 0
    while True:
        try:
            return _train(cfg, rollout, learners, candidates, items, demos, eval_items, restarts)
        except WorkersRestarted:
            restarts += 1
            log.warning("learner ranks restarted (%d); resuming from their checkpoint", restarts)


def _train(cfg: TrainConfig, rollout: Rollout, learners: Any, candidates: Sequence[str],
           items: Sequence[dict[str, Any]], demos: Sequence[Any], eval_items: Sequence[dict[str, Any]],
           restarts: int) -> dict[str, Any]:
    from rlrouter.metrics import MetricsLogger

    world = learners.world_size
    per_rank = cfg.prompts_per_step // world
    if per_rank < 1:
        raise ValueError(f"train.prompts_per_step={cfg.prompts_per_step} < learner ranks ({world})")
    reward = build_reward(cfg, candidates)
    state = learners.start()
    start = state.step
    out = Path(cfg.out_dir)
    if state.checkpoint:
        router_r1_part(reward).load_state_dict(state.extra["reward"])
        log.info("resumed from %s at step %d", state.checkpoint, start)
    else:
        # a fresh start: the ranks took init_from's weights (if set) in ``start``
        if cfg.warmup_steps and demos and not cfg.init_from:
            _cold_start(cfg, learners, demos, out)
            # the cold-start checkpoint: where RL starts, and a start for other runs (``init_from``)
            learners.save_checkpoint(str(out / "checkpoints" / "step_000000"), 0,
                                     {"reward": router_r1_part(reward).state_dict()}, {})
        learners.reset_reference()  # the KL reference is the policy RL starts from
    # the engines serve the base weights after a (re)start, or other weights (a reused group, a cold
    # start): from here on they serve ours
    sync_policy(cfg, learners, rollout)
    logger = MetricsLogger(out, run_name=out.name, append=start > 0 or restarts > 0)
    evaluate = cfg.eval_every > 0 and len(eval_items) > 0
    if evaluate and start == 0:
        logger.log(0, held_out_metrics(cfg, rollout, candidates, eval_items))  # the cold-start level
    bar = Progress(cfg.total_steps, "router-r1", initial=start, enabled=cfg.progress)
    last: dict[str, Any] = {}
    try:
        for step in range(start, cfg.total_steps):
            t_step = time.perf_counter()
            batch = [items[i] for i in batch_indices(len(items), per_rank * world, step, cfg.seed)]
            t0 = time.perf_counter()
            trajs = rollout.rollout(batch, cfg.n_samples, cfg.seed * 1_000_003, step)  # item-major
            t_rollout = time.perf_counter() - t0
            timing = _rollout_timing(rollout)
            t0 = time.perf_counter()
            scores = score_trajectories(reward, trajs)
            t_reward = time.perf_counter() - t0
            # rank r learns on prompts [r * per_rank, (r + 1) * per_rank): whole GRPO groups
            n = per_rank * cfg.n_samples
            shards = [[t.tokens for t in trajs[r * n:(r + 1) * n]] for r in range(world)]
            rewards = [[s.total for s in scores[r * n:(r + 1) * n]] for r in range(world)]
            learn = learners.train_step(shards, rewards, pad_to=max(len(t.tokens) for t in trajs))
            metrics = {**trajectory_metrics(trajs, scores, candidates), **learn}
            t0 = time.perf_counter()
            metrics["sync/bytes"] = sync_policy(cfg, learners, rollout)
            t_sync = time.perf_counter() - t0
            step_s = time.perf_counter() - t_step
            gen_tokens = timing.get("generated_tokens", 0.0)
            metrics.update({"time/step_s": step_s, "time/rollout_s": t_rollout,
                            "time/generate_s": timing.get("generate_s", t_rollout),
                            "time/route_s": timing.get("route_s", 0.0), "time/reward_s": t_reward,
                            "time/sync_s": t_sync, "rollout/tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
                            "sync/share_of_step": t_sync / max(step_s, 1e-9)})
            done = step + 1
            if evaluate and (done % cfg.eval_every == 0 or done == cfg.total_steps):
                metrics.update(held_out_metrics(cfg, rollout, candidates, eval_items))
            if done % cfg.checkpoint_every == 0 or done == cfg.total_steps:
                learners.save_checkpoint(str(out / "checkpoints" / f"step_{done:06d}"), done,
                                         {"reward": router_r1_part(reward).state_dict()}, metrics)
            logger.log(done, metrics)
            bar.update(1, reward=metrics["reward/total"], format=metrics["rollout/format_valid"],
                       loss=metrics.get("learner/loss", 0.0))
            last = {"step": done, **metrics}
    finally:
        bar.close()
        logger.close()
    return last


def _cold_start(cfg: TrainConfig, learners: Any, demos: Sequence[Any], out: Path) -> None:
    """Supervised steps on demonstrations (each rank its shard); metrics to ``warmup.jsonl``."""
    from rlrouter.metrics import MetricsLogger

    world = learners.world_size
    logger = MetricsLogger(out, tensorboard=False, ray_metrics=False, run_name="warmup", filename="warmup.jsonl")
    per_rank = max(1, cfg.warmup_batch // world)
    with Progress(cfg.warmup_steps, "cold start", enabled=cfg.progress) as bar:
        for i in range(cfg.warmup_steps):
            idx = batch_indices(len(demos), per_rank * world, i, cfg.seed + 7)
            shards = [[demos[j] for j in idx[r * per_rank:(r + 1) * per_rank]] for r in range(world)]
            m = learners.sft_step(shards, cfg.warmup_lr)
            logger.log(i + 1, m)
            bar.update(1, nll=m.get("sft/nll", 0.0))
    logger.close()


def _rollout_timing(rollout: Any) -> dict[str, float]:
    if hasattr(rollout, "timings"):
        ts = rollout.timings()
        if ts and all(ts):
            # workers run in parallel: the step waits for the slowest
            return {"generate_s": max(t.get("generate_s", 0.0) for t in ts),
                    "route_s": max(t.get("route_s", 0.0) for t in ts),
                    "generated_tokens": float(sum(t.get("generated_tokens", 0) for t in ts))}
    if hasattr(rollout, "timing"):
        return rollout.timing()
    return {}
