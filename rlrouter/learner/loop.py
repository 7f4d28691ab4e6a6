"""The Router-R1 training loop: rollout -> reward -> update -> sync, step after step (issue 3).

``run_training`` reads top to bottom and needs no Ray: ``rollout`` is anything with
``rollout(items, n_samples, seed, step)`` and ``sync(payload)`` (a ``RolloutGroup``, or a local worker
in tests), and a ``Session`` hides whether it runs under Ray Train. ``train_loop_per_worker`` is the
Ray Train entry that wires the two.

Every rank draws the same batch of items (a pure function of seed and step: that is the data cursor)
and trains on its own shard; DDP averages the gradients; rank 0 pushes the new weights to the
rollout workers and writes metrics and checkpoints.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from rlrouter.learner.learner import Learner, LearnerConfig
from rlrouter.rollout.env import Trajectory
from rlrouter.sync.transports import SyncPayload, make_payload

log = logging.getLogger(__name__)


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
    alpha: float = 0.3
    """Cost weight of the Router-R1 reward: (1 + format)(1 - alpha) + alpha * cost for a correct answer."""
    cost_window: int = 512
    outcome_metric: str = "em"
    checkpoint_every: int = 5
    """K: a checkpoint every K steps (and at the end)."""
    sync: str = "tensors"
    """Weight-sync transport: "lora" (adapter files) or "tensors" (merged tensors in buckets)."""
    sync_bucket_mb: float = 64.0
    train_path: str = ""
    out_dir: str = "outputs/run"
    resume_from: str | None = None
    """A checkpoint directory to continue from (``resume=true`` points it at the run's latest)."""
    init_from: str | None = None
    """A checkpoint whose policy weights start this run (optimizer and step fresh, no cold start): RL
    arms that share one saved cold start (``total_steps=0``)."""
    progress: bool = True
    budget: dict[str, Any] | None = None
    """ToolRL-style budget reward (``budget_B``, ``cost_weights``), added to the Router-R1 reward."""
    budget_weight: float = 1.0
    warmup_steps: int = 0
    """Cold-start supervised steps on demonstrations before RL (``rlrouter.rollout.demos``); 0 = none."""
    warmup_batch: int = 8
    warmup_lr: float | None = None
    """Learning rate of the cold start (None: the learner's)."""
    eval_every: int = 0
    """Held-out greedy evaluation every K RL steps, and once after the cold start (logged at step 0 as
    ``eval/...``): the curve that shows whether RL improves on the cold start. 0 = off."""
    eval_seed: int = 1234
    learner: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("total_steps", "prompts_per_step", "n_samples", "checkpoint_every"):
            low = 0 if f == "total_steps" else 1
            if not isinstance(getattr(self, f), int) or getattr(self, f) < low:
                raise ValueError(f"train.{f}: must be an int >= {low}, got {getattr(self, f)!r}")
        if self.sync not in ("lora", "tensors"):
            raise ValueError(f"train.sync: 'lora' or 'tensors', got {self.sync!r}")

    @property
    def learner_cfg(self) -> LearnerConfig:
        return LearnerConfig(**self.learner)


class Rollout(Protocol):
    def rollout(self, items: Sequence[dict], n_samples: int, seed: int, step: int) -> list[Trajectory]: ...

    def sync(self, payload: SyncPayload) -> float: ...


class Session:
    """Where the loop reports to: plain (one process) or Ray Train (``RayTrainSession``)."""

    rank = 0
    world_size = 1

    def checkpoint_to_resume(self) -> str | None:
        return None

    def report(self, metrics: dict[str, float], checkpoint_dir: str | None) -> None:
        pass

    def barrier(self) -> None:
        pass

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]:
        return values

    def all_reduce_max(self, value: int) -> int:
        return value


class RayTrainSession(Session):
    def __init__(self) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.rank, self.world_size = ctx.get_world_rank(), ctx.get_world_size()
        self._train = ray.train

    def checkpoint_to_resume(self) -> str | None:
        ckpt = self._train.get_checkpoint()
        if ckpt is None:
            return None
        local = tempfile.mkdtemp(prefix="rlrouter-resume-")
        return ckpt.to_directory(local)

    def report(self, metrics: dict[str, float], checkpoint_dir: str | None) -> None:
        ckpt = self._train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        self._train.report(metrics, checkpoint=ckpt)

    def barrier(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized() or self.world_size == 1:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(t)
        return {k: float(v) / self.world_size for k, v in zip(keys, t.tolist())}

    def all_reduce_max(self, value: int) -> int:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized() or self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())


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


def score_trajectories(reward: Any, trajs: Sequence[Trajectory], budget: Any = None,
                       budget_weight: float = 1.0) -> list[Any]:
    """Router-R1 scores of a batch; with ``budget`` its weighted reward is added to each total."""
    prompts, texts = [t.item["query"] for t in trajs], [t.text for t in trajs]
    scores = reward.score(prompts, texts, ground_truth=[list(t.item["ground_truth"]) for t in trajs],
                          route_costs=[t.cost for t in trajs])
    if budget is not None:
        extra = budget(prompts, texts, tool_calls=[[r.model for r in t.routes] for t in trajs])
        for s, b in zip(scores, extra):
            if b is not None:
                s.total += budget_weight * b
    return scores


def held_out_metrics(cfg: TrainConfig, rollout: Rollout, candidates: Sequence[str],
                     eval_items: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Greedy held-out evaluation of the policy the rollout workers serve, as ``eval/...`` metrics."""
    from rlrouter.eval.router_r1 import held_out_summary

    t0 = time.perf_counter()
    trajs = rollout.rollout(list(eval_items), 1, cfg.eval_seed, -1, temperature=0.0)
    s = held_out_summary(trajs, candidates, cfg.alpha, cfg.cost_window, cfg.outcome_metric)
    return {"eval/format_valid": s["format_valid"], "eval/mean_reward": s["mean_reward"],
            "eval/accuracy": s["accuracy"], "eval/cost_per_query": s["cost_per_query"],
            "eval/calls_per_query": s["calls_per_query"], "time/eval_s": time.perf_counter() - t0}


def run_training(cfg: TrainConfig, rollout: Rollout, session: Session, candidates: Sequence[str],
                 items: Sequence[dict[str, Any]], demos: Sequence[Any] = (),
                 eval_items: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Train the policy for ``cfg.total_steps`` steps; returns the last step's metrics."""
    import torch

    from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
    from rlrouter.metrics import MetricsLogger
    from rlrouter.rewards.router_r1 import RouterR1Reward

    torch.manual_seed(cfg.seed)
    rank, world = session.rank, session.world_size
    learner = Learner(cfg.learner_cfg, rank=rank, world_size=world)
    reward = RouterR1Reward(cfg.alpha, candidates=list(candidates), cost_window=cfg.cost_window,
                            metric=cfg.outcome_metric)
    budget = None
    if cfg.budget:
        from rlrouter.rewards.budget import ToolBudgetReward

        budget = ToolBudgetReward(**cfg.budget)
    start = 0
    resume = session.checkpoint_to_resume() or cfg.resume_from
    if resume:
        state = load_checkpoint(resume, learner)
        start = int(state["step"])
        reward.load_state_dict(state["extra"]["reward"])
        if rank == 0:
            # the engines serve the base weights after a (re)start: give them the checkpoint's policy
            rollout.sync(make_payload(cfg.sync, learner, learner.version, cfg.sync_bucket_mb))
        log.info("resumed from %s at step %d", resume, start)
    out = Path(cfg.out_dir)
    if not resume:
        if cfg.init_from:
            from rlrouter.learner.checkpoint import load_weights

            load_weights(cfg.init_from, learner)
            log.info("policy weights from %s", cfg.init_from)
        elif cfg.warmup_steps and demos:
            _cold_start(cfg, learner, demos, session, out)
            # the cold-start checkpoint: where RL starts, and a start for other runs (``init_from``)
            if rank == 0:
                save_checkpoint(out / "checkpoints" / "step_000000", learner, 0,
                                extra={"reward": reward.state_dict()})
            session.barrier()
        learner.set_reference_to_current()  # the KL reference is the policy RL starts from
        if rank == 0:
            # the engines may serve other weights (a reused group, a cold start): start from ours
            rollout.sync(make_payload(cfg.sync, learner, learner.version, cfg.sync_bucket_mb))
    session.barrier()
    logger = MetricsLogger(out, run_name=out.name, append=start > 0) if rank == 0 else None
    evaluate = rank == 0 and cfg.eval_every > 0 and len(eval_items) > 0
    if evaluate and start == 0 and logger is not None:
        logger.log(0, held_out_metrics(cfg, rollout, candidates, eval_items))  # the cold-start level
    bar = None
    if rank == 0 and cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.total_steps, initial=start, desc="router-r1", unit="step", dynamic_ncols=True)
    last: dict[str, Any] = {}
    per_rank = cfg.prompts_per_step // world
    if per_rank < 1:
        raise ValueError(f"train.prompts_per_step={cfg.prompts_per_step} < learner ranks ({world})")
    for step in range(start, cfg.total_steps):
        t_step = time.perf_counter()
        idx = batch_indices(len(items), per_rank * world, step, cfg.seed)
        mine = [items[i] for i in idx[rank * per_rank:(rank + 1) * per_rank]]
        t0 = time.perf_counter()
        trajs = rollout.rollout(mine, cfg.n_samples, cfg.seed * 1_000_003 + rank, step)
        t_rollout = time.perf_counter() - t0
        timing = _rollout_timing(rollout)
        t0 = time.perf_counter()
        scores = score_trajectories(reward, trajs, budget, cfg.budget_weight)
        t_reward = time.perf_counter() - t0
        pad_to = session.all_reduce_max(max(len(t.tokens) for t in trajs))
        learn = learner.train_step([t.tokens for t in trajs], [s.total for s in scores], pad_to=pad_to)
        metrics = {**trajectory_metrics(trajs, scores, candidates), **learn}
        session.barrier()
        t_sync = 0.0
        if rank == 0:
            t0 = time.perf_counter()
            payload = make_payload(cfg.sync, learner, learner.version, cfg.sync_bucket_mb)
            rollout.sync(payload)
            t_sync = time.perf_counter() - t0
            metrics["sync/bytes"] = float(payload.nbytes)
        session.barrier()
        step_s = time.perf_counter() - t_step
        gen_tokens = timing.get("generated_tokens", 0.0)
        metrics.update({"time/step_s": step_s, "time/rollout_s": t_rollout,
                        "time/generate_s": timing.get("generate_s", t_rollout),
                        "time/route_s": timing.get("route_s", 0.0), "time/reward_s": t_reward,
                        "time/sync_s": t_sync, "rollout/tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
                        "sync/share_of_step": t_sync / max(step_s, 1e-9)})
        metrics = session.all_reduce_mean(metrics)
        ckpt_dir = None
        done = step + 1
        if evaluate and (done % cfg.eval_every == 0 or done == cfg.total_steps):
            metrics.update(held_out_metrics(cfg, rollout, candidates, eval_items))
        if done % cfg.checkpoint_every == 0 or done == cfg.total_steps:
            ckpt_dir = str(out / "checkpoints" / f"step_{done:06d}")
            if rank == 0:
                save_checkpoint(ckpt_dir, learner, done, extra={"reward": reward.state_dict()})
            session.barrier()
        if logger is not None:
            logger.log(done, metrics)
        if bar is not None:
            bar.update(1)
            bar.set_postfix({"reward": f"{metrics['reward/total']:.2f}",
                             "format": f"{metrics['rollout/format_valid']:.2f}",
                             "loss": f"{metrics.get('learner/loss', 0.0):.3f}"})
        session.report({"step": done, **metrics}, ckpt_dir if rank == 0 else None)
        last = {"step": done, **metrics}
    if bar is not None:
        bar.close()
    if logger is not None:
        logger.close()
    return last


def _cold_start(cfg: TrainConfig, learner: Learner, demos: Sequence[Any], session: Session, out: Path) -> None:
    """Supervised steps on demonstrations (each rank its shard); metrics to ``warmup.jsonl``."""
    from rlrouter.metrics import MetricsLogger

    logger = MetricsLogger(out, tensorboard=False, ray_metrics=False, run_name="warmup",
                           filename="warmup.jsonl") if session.rank == 0 else None
    per_rank = max(1, cfg.warmup_batch // session.world_size)
    for i in range(cfg.warmup_steps):
        idx = batch_indices(len(demos), per_rank * session.world_size, i, cfg.seed + 7)
        mine = [demos[j] for j in idx[session.rank * per_rank:(session.rank + 1) * per_rank]]
        m = session.all_reduce_mean(learner.sft_step(mine, lr=cfg.warmup_lr))
        if logger is not None:
            logger.log(i + 1, m)
    if logger is not None:
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


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry: one learner rank. ``config`` carries the TrainConfig dict and the RolloutGroup."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = TrainConfig(**config["train"])
    run_training(cfg, config["rollout_group"], RayTrainSession(), config["candidates"], config["items"],
                 config.get("demos", ()), config.get("eval_items", ()))


def train_config_dict(cfg: TrainConfig) -> dict[str, Any]:
    return asdict(cfg)
