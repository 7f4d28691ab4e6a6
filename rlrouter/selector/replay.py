"""Regret simulation of the selector on logged outcomes (RouteLLM's GPT-4 / Mixtral table).

Each round replays one logged query: the selector picks a candidate, receives that candidate's
logged reward as feedback, and the round's regret is ``max_m reward[t, m] - reward[t, chosen]``,
i.e. against the per-query oracle that knows every candidate's outcome. The reward is the
Router-R1 reward with a correct format (arXiv:2506.09033 Eq. 4, as VSR computes it):

    R = (1 - alpha) * correct + alpha * (1 - normalised cost)

so ``alpha = 0`` is plain correctness. Policies run through the real :class:`Selector` (the same
code the Serve app runs), not a re-implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlrouter.selector.config import SelectorConfig
from rlrouter.selector.rules import normalised_cost
from rlrouter.selector.selector import SelectionRequest, Selector

POLICIES = ("thompson", "epsilon_greedy", "contextual", "oracle", "best_fixed", "random")


def router_r1_rewards(scores: np.ndarray, models: Sequence[str], costs: dict[str, float],
                      alpha: float) -> np.ndarray:
    """(N, M) rewards: (1 - alpha) * score + alpha * (1 - normalised cost of the model)."""
    scores = np.asarray(scores, dtype=np.float64)
    cost_term = np.array([1.0 - (normalised_cost(m, costs) or 0.0) if len(costs) >= 2 else 1.0 for m in models])
    return (1.0 - alpha) * scores + alpha * cost_term[None, :]


@dataclass
class ReplayResult:
    policy: str
    cumulative_regret: np.ndarray  # (T,)
    cumulative_reward: np.ndarray  # (T,)
    choices: np.ndarray  # (T,) index of the chosen model

    @property
    def total_regret(self) -> float:
        return float(self.cumulative_regret[-1]) if self.cumulative_regret.size else 0.0


def simulate(policy: str, rewards: np.ndarray, models: Sequence[str], order: np.ndarray | None = None,
             embeddings: np.ndarray | None = None, config: SelectorConfig | None = None,
             seed: int = 0) -> ReplayResult:
    """Replay ``rewards`` (N, M) in ``order`` under ``policy``; see the module docstring."""
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {POLICIES}, got {policy!r}")
    rewards = np.asarray(rewards, dtype=np.float64)
    n, m = rewards.shape
    if m != len(models):
        raise ValueError(f"models: {len(models)} names for {m} reward columns")
    order = np.arange(n) if order is None else np.asarray(order)
    r = rewards[order]  # (T, M)
    best = r.max(1)
    rng = np.random.default_rng(seed)
    if policy == "oracle":
        choices = r.argmax(1)
    elif policy == "best_fixed":
        choices = np.full(len(order), int(rewards.mean(0).argmax()))
    elif policy == "random":
        choices = rng.integers(0, m, size=len(order))
    else:
        if policy == "contextual" and embeddings is None:
            raise ValueError("embeddings: the contextual policy needs one embedding per logged query")
        base = config.to_dict() if config is not None else {}
        base.update(seed=seed, storage_path=None, use_contextual=policy == "contextual",
                    use_thompson_sampling=policy != "epsilon_greedy", max_pending_decisions=16,
                    use_router_r1_rewards=True)  # the replay's feedback is the reward
        sel = Selector(SelectorConfig.from_dict(base), list(models))
        index = {name: j for j, name in enumerate(models)}
        choices = np.empty(len(order), dtype=np.int64)
        emb = None if embeddings is None else np.asarray(embeddings)[order]
        for t in range(len(order)):
            req = SelectionRequest(candidates=list(models),
                                   embedding=None if emb is None or policy != "contextual" else emb[t])
            dec = sel.select(req)
            j = index[dec.model]
            choices[t] = j
            sel.feedback(dec.request_id, reward=float(r[t, j]))
    got = r[np.arange(len(order)), choices]
    return ReplayResult(policy, np.cumsum(best - got), np.cumsum(got), choices)
