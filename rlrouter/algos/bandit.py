"""The learning test's task: a routing bandit whose optimum is known, and the references a learner is judged by.

A few contexts (kinds of question), the candidates' names as actions, and a fixed reward per (question,
candidate). The questions of a context look the same to the policy (one prompt per context), so the best a
policy can do is one candidate per context: the one with the highest mean reward over the context's
questions. Each context's runner-up is its *trap*, built like RouterBench's ARC pair (Mistral-7B against
Yi-34B): it is right where the best is right and a little cheaper there (it wins those ties by
``tie_gain``), and it loses the other questions by a lot. Its mean is below the best's by the context's
``gap`` (0.3, 0.1, 0.03), but it beats the best on most questions. Context ``c``'s trap is context
``c + 1``'s best, so every candidate is the best somewhere and the trap somewhere else: no fixed route is
near the optimum, and a policy must tell the contexts apart.

A group-relative estimator that divides by the group's std scores how often a sample beats its
group-mates: with two candidates in a group the normalised advantages do not depend on the size of the
reward gap, so the trap (ahead on more than half of the questions) wins. Without the division the advantage
is the reward gap, and the policy climbs the mean.

References on the same table, in episodes (one routed question each):

- ``exact_ascent``: gradient ascent on the exact expected reward of a per-context softmax (no sampling);
- ``tabular_run``: a per-context softmax updated by sampled groups with one of the advantage estimators of
  ``rlrouter.algos`` (the same functions the learner calls), so each estimator's fixed point is seen
  without an LLM in the loop;
- ``thompson_run``: Thompson sampling with a Gaussian posterior per (context, candidate).

Pure numpy / torch: no Ray, no model (``benchmarks/bench_rl_bandit.py`` runs the real stack on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlrouter.algos.grpo import batch_std_advantages, grpo_advantages, rloo_advantages

CANDIDATES = ("river", "stone", "pine", "delta", "owl")
"""Action names that are one token each in SmolLM2's tokenizer: the policy's first routing token is the decision.
The first three are the contexts' bests (and each other's traps); ``delta`` and ``owl`` are poor everywhere."""
CONTEXTS = ("What is the capital city of Peru?", "What is 37 times 41?",
            "Write a Python function that reverses a string.")
"""One question per context, as different as a geography, an arithmetic and a coding question are."""
FILLER = "owl"
ESTIMATORS = ("grpo_std", "grpo", "rloo", "batch_std", "ppo")
"""``grpo_std``: group mean and std (GRPO's paper); ``grpo``: group mean only (Dr. GRPO, the shipped default);
``rloo``: leave-one-out mean; ``batch_std``: group mean, batch std; ``ppo``: a learned value per context
(the critic) as the baseline, advantages whitened over the batch (Router-R1's recipe)."""


@dataclass(frozen=True)
class BanditTask:
    """A routing bandit: ``rewards[c, q, a]`` is the reward of candidate ``a`` on question ``q`` of context ``c``."""

    contexts: tuple[str, ...]
    candidates: tuple[str, ...]
    rewards: np.ndarray  # (C, Q, A)
    traps: tuple[int, ...]
    """Each context's trap (its runner-up), as a candidate index."""

    @property
    def means(self) -> np.ndarray:
        return self.rewards.mean(axis=1)  # (C, A)

    @property
    def optimal(self) -> np.ndarray:
        return self.means.argmax(axis=1)  # (C,)

    @property
    def gaps(self) -> np.ndarray:
        """Best minus runner-up mean, per context."""
        s = np.sort(self.means, axis=1)
        return s[:, -1] - s[:, -2]

    def value(self, probs: np.ndarray) -> np.ndarray:
        """Expected reward per context of a policy ``probs`` (C, A)."""
        return (probs * self.means).sum(axis=1)

    def regret(self, probs: np.ndarray) -> float:
        """Mean over contexts of optimum minus the policy's expected reward (0 at the optimum)."""
        return float((self.means.max(axis=1) - self.value(probs)).mean())

    def p_optimal(self, probs: np.ndarray) -> np.ndarray:
        return probs[np.arange(len(self.contexts)), self.optimal]  # (C,)

    def trap_wins(self) -> np.ndarray:
        """Per context, the share of questions on which the trap scores above the best."""
        idx = np.arange(len(self.contexts))
        best = self.rewards[idx, :, self.optimal]  # (C, Q)
        trap = self.rewards[idx, :, list(self.traps)]  # (C, Q)
        return (trap > best).mean(axis=1)

    def p_trap(self, probs: np.ndarray) -> np.ndarray:
        return probs[np.arange(len(self.contexts)), list(self.traps)]  # (C,)

    def items(self) -> list[dict]:
        """Router-R1 dataset items, one per (context, question): the question's text is its context's (the
        policy cannot tell a context's questions apart), ``id`` keys the reward table."""
        return [{"id": f"c{c}q{q}", "query": ctx, "ground_truth": [""], "task": f"c{c}", "stop_at_call": 1}
                for c, ctx in enumerate(self.contexts) for q in range(self.rewards.shape[1])]

    def table(self) -> dict[str, dict[str, float]]:
        """The reward table as ``route_table``'s ``table`` param: ``{item id: {candidate: reward}}``."""
        return {f"c{c}q{q}": {a: float(self.rewards[c, q, j]) for j, a in enumerate(self.candidates)}
                for c in range(len(self.contexts)) for q in range(self.rewards.shape[1])}


def routing_bandit(gaps: tuple[float, ...] = (0.3, 0.1, 0.03), questions: int = 8, best_reward: float = 0.9,
                   tie_gain: float = 0.05, seed: int = 0) -> BanditTask:
    """The learning test's table. Context ``c``'s best candidate is ``CANDIDATES[c]`` with reward
    ``best_reward`` on every question; its trap, ``CANDIDATES[(c + 1) % C]``, wins ``5/8, 6/8, 7/8`` of the
    questions by ``tie_gain`` and loses the rest by the amount that puts its mean ``gaps[c]`` below the
    best's. The other candidates score 0.1-0.45 (fixed per question, from ``seed``), below the trap."""
    if questions < 4:
        raise ValueError(f"questions: at least 4 per context, got {questions}")
    n_ctx = len(gaps)
    if not 2 <= n_ctx <= 3:
        raise ValueError(f"gaps: 2 or 3 contexts (each best is another's trap), got {n_ctx}")
    rng = np.random.default_rng(seed)
    rewards = np.zeros((n_ctx, questions, len(CANDIDATES)))
    traps = tuple((c + 1) % n_ctx for c in range(n_ctx))
    for c, gap in enumerate(gaps):
        ties = min(questions - 1, round(questions * (5 + c) / 8))  # the trap wins more than half of them
        f = ties / questions
        loss = (gap + f * tie_gain) / (1 - f)  # (1 - f) * loss - f * tie_gain = gap
        if loss > best_reward:
            raise ValueError(f"gaps[{c}]={gap}: the trap would need a negative reward; lower the gap or tie_gain")
        rewards[c, :, :] = rng.uniform(0.1, 0.45, size=(questions, len(CANDIDATES)))
        rewards[c, :, c] = best_reward
        rewards[c, :ties, traps[c]] = best_reward + tie_gain
        rewards[c, ties:, traps[c]] = best_reward - loss
    return BanditTask(CONTEXTS[:n_ctx], CANDIDATES, rewards, traps)


STARTS = ("uniform", "wrong", "pair", "lean")


def start_logits(task: BanditTask, start: str) -> np.ndarray:
    """Per-context logits of a cold start: ``uniform``; ``wrong`` (60% on ``FILLER``, a bad candidate
    everywhere, the rest spread evenly); ``pair`` (45% on the context's best, 45% on its trap: the groups
    compare the two from the first step, the start of the short learning test in ``make test``); or ``lean``
    (60% on each context's best: a cold start that already routes per context)."""
    n_ctx, n_act = len(task.contexts), len(task.candidates)
    if start == "uniform":
        return np.zeros((n_ctx, n_act))
    if start == "pair":
        p = np.full((n_ctx, n_act), 0.1 / (n_act - 2))
        p[np.arange(n_ctx), task.optimal] = 0.45
        p[np.arange(n_ctx), list(task.traps)] = 0.45
        return np.log(p)
    if start == "wrong":
        p = np.full(n_act, 0.4 / (n_act - 1))
        p[task.candidates.index(FILLER)] = 0.6
        return np.tile(np.log(p), (n_ctx, 1))
    if start == "lean":
        p = np.full((n_ctx, n_act), 0.4 / (n_act - 1))
        p[np.arange(n_ctx), task.optimal] = 0.6
        return np.log(p)
    raise ValueError(f"start: one of {STARTS}, got {start!r}")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@dataclass
class LearningCurve:
    """P(optimal) per context and regret, after each step (index 0: the start); ``episodes`` per step."""

    episodes_per_step: int
    p_optimal: list[list[float]] = field(default_factory=list)
    p_trap: list[list[float]] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)
    probs: list[list[list[float]]] = field(default_factory=list)

    def add(self, task: BanditTask, probs: np.ndarray) -> None:
        self.p_optimal.append([float(x) for x in task.p_optimal(probs)])
        self.p_trap.append([float(x) for x in task.p_trap(probs)])
        self.regret.append(task.regret(probs))
        self.probs.append(probs.round(4).tolist())

    def to_dict(self) -> dict:
        return {"episodes_per_step": self.episodes_per_step, "p_optimal": self.p_optimal, "p_trap": self.p_trap,
                "regret": self.regret, "final_p_optimal": self.p_optimal[-1], "final_p_trap": self.p_trap[-1],
                "final_probs": self.probs[-1]}


def exact_ascent(task: BanditTask, logits: np.ndarray, steps: int, lr: float) -> LearningCurve:
    """Gradient ascent on each context's exact expected reward: ``dJ/dtheta_a = pi_a (mean_a - J)``."""
    theta = logits.astype(float).copy()
    curve = LearningCurve(episodes_per_step=0)
    curve.add(task, softmax(theta))
    for _ in range(steps):
        p = softmax(theta)
        theta += lr * p * (task.means - task.value(p)[:, None])
        curve.add(task, softmax(theta))
    return curve


def coupled_ascent(task: BanditTask, logits: np.ndarray, steps: int, lr: float, coupling: float,
                   entropy_coef: float = 0.0) -> LearningCurve:
    """Exact gradient ascent on a policy whose contexts share part of their logits, as an LLM's share weights:
    ``z[c] = w + v[c]``, with the shared ``w`` (started at 0) moved ``coupling`` times faster than each context's
    own ``v[c]`` (started at ``logits``). ``coupling`` 0 is :func:`exact_ascent`. ``entropy_coef`` adds the
    gradient of each context's entropy (an exploration term). A model of why the real stack drifts to one
    fixed route: the context with the largest gap moves the shared term, and a context pushed to a corner of
    its softmax gets a vanishing gradient back (docs/router_r1.md, the learning test)."""
    if coupling < 0:
        raise ValueError(f"coupling: must be >= 0, got {coupling}")
    w = np.zeros(task.means.shape[1])
    v = logits.astype(float).copy()
    curve = LearningCurve(episodes_per_step=0)
    curve.add(task, softmax(w + v))
    n = task.means.shape[0]
    for _ in range(steps):
        p = softmax(w + v)
        g = p * (task.means - task.value(p)[:, None]) / n  # (C, A): d mean_c J_c / d z[c]
        if entropy_coef:
            logp = np.log(np.clip(p, 1e-300, None))
            g += entropy_coef * (-p * (logp + (-(p * logp).sum(axis=1, keepdims=True)))) / n
        w += lr * coupling * g.sum(axis=0)
        v += lr * g
        curve.add(task, softmax(w + v))
    return curve


def advantages(estimator: str, rewards: np.ndarray, group_size: int, baseline: np.ndarray | None = None) -> np.ndarray:
    """Each sample's advantage under ``estimator`` (``ESTIMATORS``); ``rewards`` item-major (P * G,).
    ``ppo``: reward minus ``baseline`` (the critic's value of each sample's context), whitened over the batch
    as ``PPOConfig.whiten_advantages`` does."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if estimator == "grpo_std":
        return grpo_advantages(r, group_size, scale_by_std=True).numpy()
    if estimator == "grpo":
        return grpo_advantages(r, group_size, scale_by_std=False).numpy()
    if estimator == "rloo":
        return rloo_advantages(r, group_size).numpy()
    if estimator == "batch_std":
        return batch_std_advantages(r, group_size).numpy()
    if estimator == "ppo":
        if baseline is None:
            raise ValueError("advantages: 'ppo' needs the critic's baseline")
        a = rewards - baseline
        return (a - a.mean()) / (a.std() + 1e-8)
    raise ValueError(f"estimator: expected one of {ESTIMATORS}, got {estimator!r}")


def tabular_run(task: BanditTask, estimator: str, logits: np.ndarray, steps: int, lr: float,
                prompts_per_step: int = 6, group_size: int = 8, seed: int = 0, critic_lr: float = 0.3) -> LearningCurve:
    """A per-context softmax trained by sampled groups: each step draws ``prompts_per_step`` questions, samples
    ``group_size`` candidates for each, scores them from the table and moves the logits by the mean of
    ``advantage * grad log pi`` (plain SGD: the estimators differ only in their advantages)."""
    rng = np.random.default_rng(seed)
    n_ctx, n_q, n_act = task.rewards.shape
    theta = logits.astype(float).copy()
    value = np.zeros(n_ctx)  # the critic of ``ppo``: one value per context
    curve = LearningCurve(episodes_per_step=prompts_per_step * group_size)
    curve.add(task, softmax(theta))
    for _ in range(steps):
        p = softmax(theta)
        ctx = rng.integers(n_ctx, size=prompts_per_step)
        qs = rng.integers(n_q, size=prompts_per_step)
        acts = np.stack([rng.choice(n_act, size=group_size, p=p[c]) for c in ctx])  # (P, G)
        r = task.rewards[ctx[:, None], qs[:, None], acts].reshape(-1)  # (P * G,)
        base = np.repeat(value[ctx], group_size)
        adv = advantages(estimator, r, group_size, base).reshape(prompts_per_step, group_size)
        grad = np.zeros_like(theta)
        for i, c in enumerate(ctx):
            for j, a in enumerate(acts[i]):
                g = -p[c].copy()
                g[a] += 1.0
                grad[c] += adv[i, j] * g
        theta += lr * grad / (prompts_per_step * group_size)
        if estimator == "ppo":
            for c in np.unique(ctx):
                value[c] += critic_lr * (r.reshape(prompts_per_step, group_size)[ctx == c].mean() - value[c])
        curve.add(task, softmax(theta))
    return curve


def thompson_run(task: BanditTask, steps: int, pulls_per_step: int = 48, seed: int = 0, noise: float = 0.3,
                 draws: int = 512) -> LearningCurve:
    """Thompson sampling per context with a Gaussian posterior on each candidate's mean reward (prior
    N(0.5, 1), observation noise ``noise``); ``pulls_per_step`` routed questions a step, as many episodes as a
    learner step. P(optimal) is the chance that a posterior draw ranks the best candidate first."""
    rng = np.random.default_rng(seed)
    n_ctx, n_q, n_act = task.rewards.shape
    n = np.zeros((n_ctx, n_act))
    total = np.zeros((n_ctx, n_act))

    def posterior() -> tuple[np.ndarray, np.ndarray]:
        prec = 1.0 + n / noise ** 2
        mean = (0.5 + total / noise ** 2) / prec
        return mean, 1.0 / np.sqrt(prec)

    def choice_probs() -> np.ndarray:
        mean, sd = posterior()
        sample = mean[None] + sd[None] * rng.standard_normal((draws, n_ctx, n_act))
        best = sample.argmax(axis=-1)  # (draws, C)
        return np.stack([np.bincount(best[:, c], minlength=n_act) / draws for c in range(n_ctx)])

    curve = LearningCurve(episodes_per_step=pulls_per_step)
    curve.add(task, choice_probs())
    for _ in range(steps):
        for _ in range(pulls_per_step):
            c, q = rng.integers(n_ctx), rng.integers(n_q)
            mean, sd = posterior()
            a = int((mean[c] + sd[c] * rng.standard_normal(n_act)).argmax())
            n[c, a] += 1
            total[c, a] += task.rewards[c, q, a]
        curve.add(task, choice_probs())
    return curve
