"""The learning test through the real stack: the routing bandit (``rlrouter.algos.bandit``) trained by
``RouterR1Trainer`` on vLLM rollout workers (``RolloutGroup``), Ray Train learner ranks (``LearnerGroup``,
LoRA), the weight sync and the reward registry (``route_table``).

The policy sees one short prompt per context (``rollout.env.action: compact``) with the turn opened by
``<search>``, so its first generated token names the candidate: the route probabilities after each step
are read exactly from the engine (``next_token_logprobs`` of each name's first token). A cold start on
demonstrations sets the start (``uniform``: every candidate equally; ``wrong``: 60% the worst), then RL
steps with the chosen advantage estimator. What comes back is the same ``LearningCurve`` the tabular references
give, so the curves can be drawn side by side.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlrouter.algos.bandit import BanditTask, LearningCurve, softmax, start_logits
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.learner.group import LearnerGroup
from rlrouter.models import load_tokenizer
from rlrouter.pool.pool import CandidatePool
from rlrouter.rollout.env import EnvConfig, prompt_ids
from rlrouter.rollout.parsing import TrajectoryTokens
from rlrouter.trainer.router_r1 import RouterR1Trainer

log = logging.getLogger(__name__)

ENV = {"action": "compact", "max_turns": 1, "max_new_tokens": 8, "max_total_tokens": 320, "prefill": "<search>",
       "temperature": 1.0}
"""The bandit's rollout: one compact route, the turn opened by ``<search>`` (the first token is the decision)."""
PRICES = {"river": 1.0, "stone": 1.0, "pine": 1.0, "delta": 0.2, "owl": 0.5}
"""Prices the prompt shows (the trap is the cheapest, as Mistral-7B is); the reward is the table's."""

LR = 2e-4
"""The LoRA learning rate of the bandit runs. With AdamW every step moves each weight by about ``lr``
whatever the gradient's size, and the contexts share every weight: at 1e-3 one step moved all three contexts
the same way and the policy ended on one fixed route within two steps; at 1e-4 every context's P(optimal)
rose step by step (docs/router_r1.md)."""

ESTIMATOR_LEARNER: dict[str, dict[str, Any]] = {
    "grpo_std": {"algo": "grpo", "grpo": {"scale_by_std": True, "adv_estimator": "grpo"}},
    "grpo": {"algo": "grpo", "grpo": {"scale_by_std": False, "adv_estimator": "grpo"}},
    "rloo": {"algo": "grpo", "grpo": {"scale_by_std": False, "adv_estimator": "rloo"}},
    "batch_std": {"algo": "grpo", "grpo": {"scale_by_std": False, "adv_estimator": "batch_std"}},
    "ppo": {"algo": "ppo", "ppo": {"kl": {"coef": 0.0, "estimator": "k1", "in_reward": True}}},
}
"""Each estimator of ``rlrouter.algos.bandit.ESTIMATORS`` as the learner's config (no KL term: the table's
optimum is the target, and no reference forward pass is paid)."""


def pool_config(task: BanditTask, folder: Path) -> dict[str, Any]:
    """A replay pool of the task's candidates over a RouterBench-style table of their mean reward per context
    (written to ``folder``). The bandit's routes end the trajectory before a call is sent (``stop_at_call``),
    so the table is there for the pool's shape, not read."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bandit_table.parquet"
    rows = []
    for c, ctx in enumerate(task.contexts):
        row: dict[str, Any] = {"prompt": ctx, "eval_name": f"c{c}", "sample_id": f"c{c}"}
        for j, a in enumerate(task.candidates):
            row[a] = float(np.clip(task.means[c, j], 0.0, 1.0))
            row[f"{a}|total_cost"] = PRICES.get(a, 1.0) * 1e-6
        rows.append(row)
    pd.DataFrame(rows).to_parquet(path)
    return {"candidates": [{"name": a, "price_in": PRICES.get(a, 1.0), "price_out": PRICES.get(a, 1.0),
                            "backend": "replay", "options": {"model": a, "source": str(path), "on_missing": "penalty"}}
                           for a in task.candidates]}


def reward_config(task: BanditTask) -> list[dict[str, Any]]:
    """The table as the training reward (``route_table``), beside a weight-0 ``router_r1`` whose format and
    outcome parts the trainer logs."""
    return [{"name": "router_r1", "alpha": 0.0, "weight": 0.0},
            {"name": "route_table", "table": task.table(), "weight": 1.0}]


def bandit_demonstrations(task: BanditTask, tokenizer: Any, candidates: list[Any], start: str, per_context: int = 40,
                   seed: int = 0) -> list[TrajectoryTokens]:
    """Cold-start demonstrations: per context, ``per_context`` routes drawn from the start's distribution
    (``start_logits``), each the prompt followed by ``NAME</search>``."""
    rng = np.random.default_rng(seed)
    probs = softmax(start_logits(task, start))
    env = EnvConfig(**ENV)
    out = []
    for c, ctx in enumerate(task.contexts):
        ids = prompt_ids(tokenizer, ctx, candidates, env)
        counts = np.round(probs[c] * per_context).astype(int)
        counts[counts.argmax()] += per_context - counts.sum()
        for a, k in zip(task.candidates, counts):
            action = tokenizer.encode(f"{a}</search>", add_special_tokens=False)
            for _ in range(int(k)):
                t = TrajectoryTokens(list(ids))
                t.add_policy(action, [0.0] * len(action))
                out.append(t)
    rng.shuffle(out)
    return out


class RouteProbe:
    """The policy's route probabilities per context, read from the engine: the log-prob of each candidate
    name's token right after ``<search>``. Each name must be one token (``rlrouter.algos.bandit.CANDIDATES``
    are), so that token is the whole decision."""

    def __init__(self, task: BanditTask, tokenizer: Any, candidates: list[Any], rollout: Any):
        env = EnvConfig(**ENV)
        self.task, self.rollout = task, rollout
        self.prompts = [prompt_ids(tokenizer, ctx, candidates, env) for ctx in task.contexts]
        tokens = [tokenizer.encode(a, add_special_tokens=False) for a in task.candidates]
        if any(len(t) != 1 for t in tokens):
            raise ValueError(f"candidates {task.candidates}: each name must be one token, got {tokens}")
        self.first = [t[0] for t in tokens]

    def probs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(probs, mass)``: per context the distribution over candidates (renormalised over the names) and
        the probability mass the names hold (1 - mass: the chance of an invalid route)."""
        lp = np.array(self.rollout.next_token_logprobs(self.prompts, self.first))  # (C, A)
        p = np.exp(lp)
        mass = p.sum(axis=1)
        return p / mass[:, None], mass


def run_bandit(task: BanditTask, estimator: str, start: str, rollout: Any, resources: Any, out_dir: Path,
               steps: int = 30, lr: float = LR, prompts_per_step: int = 6, n_samples: int = 8,
               warmup_steps: int = 20, warmup_lr: float = 2e-3, seed: int = 0,
               learner: dict[str, Any] | None = None, init_from: str | None = None) -> dict[str, Any]:
    """One run: a fresh learner group, a cold start to ``start``, ``steps`` RL steps with ``estimator``.
    ``rollout``: a ``RolloutGroup`` built with ``ENV`` and ``pool_config(task)`` (shared across runs: each run's
    start syncs its own weights). Returns the curve (``LearningCurve.to_dict``) with each step's wall time and the
    valid-route mass. ``init_from``: start RL from another run's cold-start checkpoint (``<out_dir>/checkpoints/
    step_000000``, ``start`` naming that run's start) instead of running a cold start: runs that compare
    estimators from one start share it."""
    pool = CandidatePool.from_config(pool_config(task, out_dir / "pool"))
    candidates = [pool.get(n) for n in pool.names]
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    probe = RouteProbe(task, tokenizer, candidates, rollout)
    curve = LearningCurve(episodes_per_step=prompts_per_step * n_samples)
    masses: list[list[float]] = []
    step_s: list[float] = []
    t_last = [time.perf_counter()]

    def measure(step: int) -> dict[str, float]:
        now = time.perf_counter()
        if step > 0:
            step_s.append(now - t_last[0])
        p, mass = probe.probs()
        curve.add(task, p)
        masses.append([float(m) for m in mass])
        t_last[0] = time.perf_counter()
        return {f"bandit/p_optimal/{c}": float(v) for c, v in enumerate(task.p_optimal(p))} | {
            "bandit/regret": task.regret(p)}

    knobs = {"lr": lr, "lr_warmup_steps": 3, "micro_batch_size": n_samples, "critic_lr": lr,
             **ESTIMATOR_LEARNER[estimator], **(learner or {})}
    train = RouterR1TrainConfig(total_steps=steps, prompts_per_step=prompts_per_step, n_samples=n_samples, seed=seed,
                                checkpoint_every=max(steps, 1), progress=False, warmup_steps=warmup_steps,
                                warmup_batch=8, warmup_lr=warmup_lr, out_dir=str(out_dir), reward=reward_config(task),
                                learner=knobs, init_from=init_from)
    items = task.items()
    demos = bandit_demonstrations(task, tokenizer, candidates, start, seed=seed)
    t0 = time.perf_counter()
    with LearnerGroup(train, resources, max_failures=0, run_name=f"bandit_{estimator}_{start}") as learners:
        RouterR1Trainer(train, rollout, learners, pool.names, items, demos).fit(probe=measure)
    result = learners.result
    if getattr(result, "error", None):
        raise RuntimeError(f"bandit run {estimator}/{start} failed: {result.error}")
    pool.close_sync()
    out = curve.to_dict()
    out.update({"estimator": estimator, "start": start, "lr": lr, "steps": steps, "valid_mass": masses,
                "step_s": step_s, "wall_s": time.perf_counter() - t0,
                "episodes": steps * prompts_per_step * n_samples})
    log.info("bandit %s/%s: final p_optimal %s", estimator, start, out["final_p_optimal"])
    return out
