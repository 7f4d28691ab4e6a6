"""The Router-R1 trainer: the driver-side controller of a run (rollout -> reward -> update -> sync).

``RouterR1Trainer.fit`` reads top to bottom, as verl's ``RayPPOTrainer.fit`` does. The driver draws the
step's prompts (a pure function of seed and step: the data cursor), rolls them out through the
``RolloutGroup``, scores them, hands each learner rank its shard in ONE ``train_step`` call
(the ranks keep model, optimizer and DDP state; DDP averages the gradients), takes the new
weights from rank 0 and syncs the rollout workers. Rollout workers are driven by nobody else.

The functions below are the pieces the trainer and the job share: the data cursor, the step's
metrics, the run's reward and its held-out settings, and the weight sync.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from rlrouter.config import to_plain
from rlrouter.data.io import read_jsonl, write_jsonl
from rlrouter.data.question import task_of
from rlrouter.distributed.commanded import WorkersRestarted
from rlrouter.eval.route_scores import trajectory_share
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.metrics import MetricsLogger
from rlrouter.progress import Progress
from rlrouter.rewards.registry import build_reward, with_params
from rlrouter.rewards.router_r1 import router_r1_part, score_trajectories
from rlrouter.rollout.env import Trajectory
from rlrouter.storage import join
from rlrouter.sync.transports import SyncPayload
from rlrouter.trainer.curriculum import Curriculum, batch_indices
from rlrouter.trainer.report import held_out_summary

log = logging.getLogger(__name__)


def cut_metrics(path: Path, last_step: int) -> int:
    """Drop the rows of ``path`` (a run's ``metrics.jsonl``) logged for steps after ``last_step``, the
    step a resumed or restarted run continues from, so the steps it replays appear once; returns how
    many rows were dropped. A missing file is left missing."""
    if not path.exists():
        return 0
    rows = [row for _, row in read_jsonl(path)]
    kept = [row for row in rows if row.get("step", 0) <= last_step]
    if len(kept) < len(rows):
        write_jsonl(path, kept)
    return len(rows) - len(kept)


class Rollout(Protocol):
    def rollout(self, items: Sequence[dict], n_samples: int, seed: int, step: int) -> list[Trajectory]: ...

    def sync(self, payload: SyncPayload) -> float: ...


def sync_policy(cfg: RouterR1TrainConfig, learners: Any, rollout: Any) -> float:
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


def informative_groups(rewards: Sequence[float], group_size: int, tol: float = 1e-6) -> list[bool]:
    """Per group (contiguous runs of ``group_size`` rewards, item-major as the rollout lays them out):
    whether its samples score differently. A group whose rewards are all equal has zero GRPO advantage."""
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards are not whole groups of {group_size}")
    return [max(g) - min(g) > tol for g in (rewards[i:i + group_size] for i in range(0, len(rewards), group_size))]


def pick_groups(rounds: Sequence[Sequence[bool]], size: int) -> list[tuple[int, int]]:
    """A step's batch under dynamic sampling: ``size`` (round, group) pairs, the informative groups in the
    order they were drawn, then, when every round together has too few, round 0's other groups in order."""
    picked = [(r, g) for r, flags in enumerate(rounds) for g, ok in enumerate(flags) if ok][:size]
    fill = [(0, g) for g, ok in enumerate(rounds[0]) if not ok]
    return picked + fill[:size - len(picked)]


def trajectory_metrics(trajs: Sequence[Trajectory], scores: Sequence[Any], candidates: Sequence[str]) -> dict:
    """Rollout and reward metrics of one batch (``rollout/...`` and ``reward/...``, docs/metrics.md)."""
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
    by_task: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_task.setdefault(task_of(t.item), []).append(t)
    if len(by_task) > 1:  # the sampled policy's calls per task: does it route by task, and where
        for task, ts in by_task.items():
            m.update({f"rollout/share/{task}/{c}": v for c, v in trajectory_share(ts, candidates).items() if v})
    return m


def rollout_rows(step: int, idx: Sequence[int], trajs: Sequence[Trajectory], scores: Sequence[Any],
                 group_size: int, curriculum: Curriculum) -> list[dict[str, Any]]:
    """One row per trajectory of a step (``train.rollout_dump``): its training question, sample, the
    curriculum's stratum, reward parts, format failure, calls and text."""
    return [{"step": step, "question": int(idx[k // group_size]), "sample": k % group_size,
             "stratum": curriculum.stratum_of(idx[k // group_size]), "reward": s.total, "format": s.format,
             "outcome": s.outcome, "cost": s.cost, "failure": s.failure,
             "calls": [r.model for r in t.routes], "text": t.text}
            for k, (t, s) in enumerate(zip(trajs, scores))]


def build_train_reward(cfg: RouterR1TrainConfig, candidates: Sequence[str]) -> Any:
    """The run's training reward, built through the registry, with the pool's candidates filled in."""
    filled = resolve_cost_bounds(to_plain(cfg.reward), (cfg.eval_reference or {}).get("cost_bounds"))
    for name in ("router_r1", "router_r1_format"):  # the parts that check routes against the candidates
        filled = with_params(filled, name, candidates=list(candidates))
    reward = build_reward(filled, "train.reward")
    router_r1_part(reward)
    return reward


def resolve_cost_bounds(reward: Any, bounds: Sequence[float] | None) -> Any:
    """The reward config with every ``cost_bounds: reference`` replaced by the reference window's bounds
    (``RouterR1TrainConfig.eval_reference``). ``bounds`` ``None`` (no reference: live candidates) leaves Router-R1's
    window (``cost_bounds: null``)."""
    if isinstance(reward, list):
        return [resolve_cost_bounds(r, bounds) for r in reward]
    if not isinstance(reward, dict):
        return reward
    out = {k: resolve_cost_bounds(v, bounds) if k in ("functions", "params") else v for k, v in reward.items()}
    if out.get("cost_bounds") == "reference":
        out["cost_bounds"] = None if bounds is None else [float(bounds[0]), float(bounds[1])]
    return out


EVAL_CHUNK = 256  # held-out questions per greedy rollout call when there are more: one progress line each


def held_out_rollout(rollout: Any, items: Sequence[dict[str, Any]], seed: int, desc: str = "held-out",
                     enabled: bool = True, chunk: int = EVAL_CHUNK, samples: int = 0) -> list[Any]:
    """Greedy trajectories of ``items``, one each, in order; ``samples`` k > 0: k trajectories a question
    (item-major) sampled as in training (the rollout's temperature), the sampled policy. Up to ``chunk``
    questions go in one call (``make run``'s evaluations, unchanged); more go ``chunk`` at a time with a
    progress line after each (a 1,600-question evaluation takes half an hour on CPU)."""
    items = list(items)
    n, temperature = (samples, None) if samples > 0 else (1, 0.0)
    if len(items) <= chunk:
        return rollout.rollout(items, n, seed, -1, temperature=temperature)
    out: list[Any] = []
    with Progress(len(items), desc, unit="question", enabled=enabled) as bar:
        for a in range(0, len(items), chunk):
            part = rollout.rollout(items[a:a + chunk], n, seed, -1, temperature=temperature)
            out.extend(part)
            bar.update(len(part) // n)
    return out


class RouterR1Trainer:
    """The Router-R1 controller: drives the rollout workers and the learner ranks through a run.

    ``fit`` reads top to bottom, as verl's ``RayPPOTrainer.fit`` does: start the ranks (restore a
    checkpoint, or run the cold start), make the engines serve the ranks' weights, then per step draw
    the prompts (the data cursor), roll them out, score them, update, sync, evaluate and checkpoint.
    The trainer owns the loop, the data and the reward; ``learners`` and ``rollout`` only do what they
    are asked and are driven by nobody else.
    """

    def __init__(self, cfg: RouterR1TrainConfig, rollout: Rollout, learners: Any, candidates: Sequence[str],
                 items: Sequence[dict[str, Any]], demos: Sequence[Any] = (),
                 eval_items: Sequence[dict[str, Any]] = (), curriculum: Curriculum | None = None):
        """``learners``: a ``LearnerGroup`` (Ray Train ranks) or ``LocalLearners`` (this process, no Ray);
        ``rollout``: a ``RolloutGroup`` or a ``LocalRollout``; ``items``: the training prompts;
        ``demos``: the cold start's demonstrations; ``eval_items``: the held-out prompts; ``curriculum``:
        which of ``items`` each step draws (``rlrouter.trainer.curriculum``; default the natural mix)."""
        self.cfg, self.rollout, self.learners = cfg, rollout, learners
        self.candidates, self.items, self.demos, self.eval_items = candidates, items, demos, eval_items
        self.curriculum = curriculum or Curriculum.natural(len(items))
        self.out = Path(cfg.out_dir)
        self.restarts = 0
        self.reward: Any = None

    def fit(self, probe: Callable[[int], dict[str, float]] | None = None) -> dict[str, Any]:
        """Train for ``total_steps`` steps; returns the last step's metrics.

        ``probe``: called with the step number after the start (0) and after every step, once the engines
        serve that step's weights; the metrics it returns join the step's row (the learning test reads the
        policy's route probabilities with it).

        If a learner rank dies, Ray Train restarts the ranks from their last checkpoint
        (``FailureConfig``) and the pending call raises ``WorkersRestarted``: the run starts again
        from where the ranks stand.
        """
        cfg = self.cfg
        while True:
            try:
                start = self._start()
                if start > 0:  # rows of steps after the checkpoint are logged again as they are replayed
                    cut_metrics(self.out / "metrics.jsonl", start)
                logger = MetricsLogger(self.out, run_name=self.out.name, append=start > 0)
                if (self._evaluate or probe is not None) and start == 0:  # the cold-start level
                    logger.log(0, {**(self.validate() if self._evaluate else {}), **(probe(0) if probe else {})})
                last: dict[str, Any] = {}
                with Progress(cfg.total_steps, "router-r1", initial=start, enabled=cfg.progress) as bar, \
                        closing(logger):
                    for step in range(start, cfg.total_steps):
                        metrics = self.train_step(step)  # rollout -> reward -> update -> sync
                        done = step + 1
                        if self._evaluate and (done % cfg.eval_every == 0 or done == cfg.total_steps):
                            metrics.update(self.validate())
                        if probe is not None:
                            metrics.update(probe(done))
                        if done % cfg.checkpoint_every == 0 or done == cfg.total_steps:
                            self._save_checkpoint(done, metrics)
                        logger.log(done, metrics)
                        bar.update(1, reward=metrics["reward/total"], format=metrics["rollout/format_valid"],
                                   loss=metrics.get("learner/loss", 0.0))
                        last = {"step": done, **metrics}
                return last
            except WorkersRestarted:
                self.restarts += 1
                log.warning("learner ranks restarted (%d); resuming from their checkpoint", self.restarts)

    def _start(self) -> int:
        """Start (or wait for restarted) learner ranks; the step they stand at. A fresh run runs the cold
        start (saved as ``step_000000``) and takes its KL reference; either way the engines then serve
        the ranks' weights (after a (re)start they serve the base weights, or a reused group's)."""
        cfg = self.cfg
        if self.learners.world_size > cfg.prompts_per_step:
            raise ValueError(f"train.prompts_per_step={cfg.prompts_per_step} < learner ranks "
                             f"({self.learners.world_size})")
        self.reward = build_train_reward(cfg, self.candidates)
        state = self.learners.start()
        if state.checkpoint:
            router_r1_part(self.reward).load_state_dict(state.extra["reward"])
            log.info("resumed from %s at step %d", state.checkpoint, state.step)
        else:
            # a fresh start: the ranks took init_from's weights (if set) in ``start``
            if cfg.warmup_steps and self.demos and not cfg.init_from:
                self._cold_start()
                # the cold-start checkpoint: where RL starts, and a start for other runs (``init_from``)
                self._save_checkpoint(0, {})
            # the KL reference is the policy RL starts from, and RL's optimizer starts fresh (no cold-start momentum)
            self.learners.reset_reference()
        sync_policy(cfg, self.learners, self.rollout)
        return state.step

    def train_step(self, step: int) -> dict[str, float]:
        """One RL step: draw the step's prompts, roll them out, score them, update every rank on its
        shard in one call, and make the engines serve the new weights. Its metrics."""
        cfg, world = self.cfg, self.learners.world_size
        per_rank = cfg.prompts_per_step // world
        t_step = time.perf_counter()
        size, group = per_rank * world, cfg.n_samples
        rounds: list[tuple[list[Trajectory], list[Any]]] = []
        flags: list[list[bool]] = []
        drawn: list[list[int]] = []  # each round's training questions
        t_rollout = t_reward = 0.0
        timing: dict[str, float] = {}
        # round 0 is the step's batch; with filter_groups, more batches (other permutations of the data)
        # until enough groups have reward spread
        while not rounds or (len(rounds) <= cfg.filter_groups and sum(map(sum, flags)) < size):
            r = len(rounds)
            idx = self.curriculum.draw(step, size, cfg.seed + 7919 * r)
            drawn.append(idx)
            t0 = time.perf_counter()
            trajs = self.rollout.rollout([self.items[i] for i in idx], group,  # item-major
                                         cfg.seed * 1_000_003 + 7919 * r, step)
            t_rollout += time.perf_counter() - t0
            for k, v in _rollout_timing(self.rollout).items():
                timing[k] = timing.get(k, 0.0) + v
            t0 = time.perf_counter()
            scores = score_trajectories(self.reward, trajs)
            t_reward += time.perf_counter() - t0
            rounds.append((trajs, scores))
            flags.append(informative_groups([s.total for s in scores], group))
        picked = pick_groups(flags, size) if cfg.filter_groups else [(0, g) for g in range(size)]
        used = [(rounds[r][0][g * group + j], rounds[r][1][g * group + j]) for r, g in picked for j in range(group)]
        # rank r learns on groups [r * per_rank, (r + 1) * per_rank): whole GRPO groups
        n = per_rank * group
        shards = [[t.tokens for t, _ in used[r * n:(r + 1) * n]] for r in range(world)]
        rewards = [[s.total for _, s in used[r * n:(r + 1) * n]] for r in range(world)]
        formed = [[s.format == 0 for _, s in used[r * n:(r + 1) * n]] for r in range(world)]
        learn = self.learners.train_step(shards, rewards, pad_to=max(len(t.tokens) for t, _ in used),
                                         well_formed=formed)
        # the rollout metrics describe the policy: round 0, the batch an unfiltered step draws
        trajs, scores = rounds[0]
        metrics = {**trajectory_metrics(trajs, scores, self.candidates), **learn}
        metrics.update(self.curriculum.metrics(drawn[0], scores, [len(t.routes) for t in trajs], group))
        if cfg.rollout_dump:
            write_jsonl(self.out / "rollouts" / f"step_{step + 1:06d}.jsonl",  # numbered as metrics.jsonl
                        rollout_rows(step + 1, drawn[0], trajs, scores, group, self.curriculum))
        if group > 1:  # one sample per prompt (PPO) forms no group
            metrics["rollout/informative_groups"] = sum(flags[0]) / len(flags[0])
        if cfg.filter_groups:
            metrics.update({"rollout/sampling_rounds": float(len(rounds)),
                            "rollout/filled_groups": float(sum(not flags[r][g] for r, g in picked))})
        t0 = time.perf_counter()
        metrics["sync/bytes"] = sync_policy(cfg, self.learners, self.rollout)
        t_sync = time.perf_counter() - t0
        step_s = time.perf_counter() - t_step
        gen_tokens = timing.get("generated_tokens", 0.0)
        metrics.update({"time/step_s": step_s, "time/rollout_s": t_rollout,
                        "time/generate_s": timing.get("generate_s", t_rollout),
                        "time/route_s": timing.get("route_s", 0.0), "time/reward_s": t_reward,
                        "time/sync_s": t_sync, "rollout/tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
                        "sync/share_of_step": t_sync / max(step_s, 1e-9)})
        return metrics

    @property
    def _evaluate(self) -> bool:
        return self.cfg.eval_every > 0 and len(self.eval_items) > 0

    def validate(self) -> dict[str, float]:
        """Greedy held-out evaluation of the policy the rollout workers serve, as ``eval/...`` metrics."""
        cfg = self.cfg
        t0 = time.perf_counter()
        trajs = held_out_rollout(self.rollout, self.eval_items, cfg.eval_seed, enabled=cfg.progress)
        s = held_out_summary(trajs, self.candidates, cfg.reward_spec, cfg.eval_reference)
        if s["format_failures"]:
            log.info("held-out format failures (most common): %s", s["format_failures"])
        shares = {f"eval/strong_share/{task}": v for task, v in s.get("strong_share_by_task", {}).items()}
        shares.update({f"eval/share/{task}/{c}": v for task, row in s["route_share_by_task"].items()
                       for c, v in row.items() if v})  # the calls per task, the candidates it called
        return {"eval/format_valid": s["format_valid"], "eval/mean_reward": s["mean_reward"],
                "eval/accuracy": s["accuracy"], "eval/cost_per_query": s["cost_per_query"],
                "eval/calls_per_query": s["calls_per_query"], **shares, "time/eval_s": time.perf_counter() - t0}

    def _save_checkpoint(self, step: int, metrics: dict[str, float]) -> None:
        self.learners.save_checkpoint(join(self.cfg.checkpoints, f"step_{step:06d}"), step,
                                      {"reward": router_r1_part(self.reward).state_dict()}, metrics)

    def _cold_start(self) -> None:
        """Supervised steps on demonstrations (each rank its shard); metrics to ``warmup.jsonl``."""
        cfg, demos, world = self.cfg, self.demos, self.learners.world_size
        logger = MetricsLogger(self.out, tensorboard=False, ray_metrics=False, run_name="warmup",
                               filename="warmup.jsonl")
        per_rank = max(1, cfg.warmup_batch // world)
        with Progress(cfg.warmup_steps, "cold start", enabled=cfg.progress) as bar:
            for i in range(cfg.warmup_steps):
                idx = batch_indices(len(demos), per_rank * world, i, cfg.seed + 7)
                shards = [[demos[j] for j in idx[r * per_rank:(r + 1) * per_rank]] for r in range(world)]
                m = self.learners.sft_step(shards, cfg.warmup_lr)
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
