"""Linear Thompson sampling on query embeddings, one Bayesian ridge model per candidate.

Beyond what VSR offers: each candidate keeps ``A = Lambda + sum w x x'`` and
``b = sum w r x`` over the contexts x (the L2-normalised MiniLM embedding with a constant 1 appended)
and rewards r in [0, 1] it was given. Its posterior is N(mu = A^-1 b, v^2 A^-1) (Agrawal & Goyal
2013). The selector only needs the draw of ``x' theta`` for the current x, and that scalar is
exactly N(x' mu, v^2 x' A^-1 x), so a decision costs O(d^2) per candidate instead of the O(d^3)
of drawing the whole theta. ``A^-1`` is kept directly and updated with Sherman-Morrison.

Two choices make it a context-free Thompson sampler plus a residual on the embedding. On the
RouteLLM replay this beats context-free Thompson at reward alpha 0 and 0.1 and ties it at 0.3,
where no topic favours another candidate (docs/serve.md, "Measures"):

- **The prior is strong on the embedding weights and nearly flat on the intercept**:
  ``Lambda = diag(prior, ..., prior, INTERCEPT_PRIOR)``. The intercept then tracks the candidate's
  mean reward from the first feedback on (a prior of 1 on it means one pseudo-reward of 0, which
  makes an unlucky candidate look worse than it is), while the embedding weights only move where the
  data keeps pointing, so exploration along 384 directions stays cheap.
- **The noise scale is the reward's own standard deviation**, ``v = noise * sqrt(rbar (1 - rbar))``
  with rbar = (1 + sum w r) / (2 + n), the mean of the Beta(1, 1)-prior posterior that context-free
  Thompson keeps (the Bernoulli bound on the variance of a reward in [0, 1]). Along the intercept
  the draw is then close to the normal approximation of that Beta posterior; a fixed v explores too
  much where rewards are nearly certain and too little where they are not. The Beta mean rather than
  the plain average keeps one early 0 (or 1) from making the candidate look certain.
"""

from __future__ import annotations

import math
import random

import numpy as np

INTERCEPT_PRIOR = 0.01
"""Ridge prior of the intercept (the weights get ``prior``): nearly flat, so it learns the mean at once."""


def context_vector(embedding: np.ndarray | list[float]) -> np.ndarray:
    """The feature vector of a query: unit-norm embedding plus an intercept term. Shape (d + 1,)."""
    e = np.asarray(embedding, dtype=np.float64).reshape(-1)
    if e.size == 0 or not np.all(np.isfinite(e)):
        raise ValueError("embedding: expected a non-empty vector of finite numbers")
    n = float(np.linalg.norm(e))
    if n > 0:
        e = e / n
    return np.concatenate([e, [1.0]])


def reward_std(reward_sum: float, n: float) -> float:
    """sqrt(rbar (1 - rbar)) with rbar = (1 + reward_sum) / (2 + n), the Beta(1, 1) posterior mean."""
    rbar = min(1.0, max(0.0, (1.0 + reward_sum) / (2.0 + max(n, 0.0))))
    return math.sqrt(rbar * (1.0 - rbar))


class LinearThompsonArm:
    """Bayesian linear regression of one candidate's reward on the context vector.

    The last feature is the intercept (``context_vector`` appends a constant 1), so ``b[-1]`` is the
    weighted sum of the rewards: with ``n`` it gives the mean reward, and a restored snapshot
    (``a_inv``, ``b``, ``n``) needs nothing more.
    """

    def __init__(self, dim: int, prior: float = 1.0, intercept_prior: float = INTERCEPT_PRIOR):
        if dim < 1:
            raise ValueError(f"dim: expected >= 1, got {dim}")
        if not prior > 0 or not intercept_prior > 0:
            raise ValueError(f"prior, intercept_prior: expected > 0, got {prior}, {intercept_prior}")
        self.dim = dim
        self.prior = float(prior)
        precision = np.full(dim, self.prior)
        precision[-1] = float(intercept_prior)
        self.a_inv = np.diag(1.0 / precision)  # (d, d)
        self.b = np.zeros(dim)  # (d,)
        self.n = 0.0  # total weight of the updates
        self._mu: np.ndarray | None = None

    @property
    def mu(self) -> np.ndarray:
        if self._mu is None:
            self._mu = self.a_inv @ self.b
        return self._mu

    @property
    def reward_std(self) -> float:
        """The noise scale's reward standard deviation (see the module docstring)."""
        return reward_std(float(self.b[-1]), self.n)

    def mean_and_std(self, x: np.ndarray) -> tuple[float, float]:
        """Posterior mean and standard deviation (before the noise scale v) of x' theta."""
        ax = self.a_inv @ x
        return float(x @ self.mu), math.sqrt(max(float(x @ ax), 0.0))

    def sample(self, x: np.ndarray, noise: float, rng: random.Random) -> float:
        """One Thompson draw of the expected reward at x: mean + noise * reward_std * std * z."""
        mean, std = self.mean_and_std(x)
        return mean + noise * self.reward_std * std * rng.gauss(0.0, 1.0)

    def update(self, x: np.ndarray, reward: float, weight: float = 1.0) -> None:
        """A += w x x', b += w r x, with A^-1 updated by Sherman-Morrison."""
        if weight <= 0:
            return
        ax = self.a_inv @ x  # (d,)
        denom = 1.0 / weight + float(x @ ax)
        self.a_inv -= np.outer(ax, ax) / denom
        self.b += weight * reward * x
        self.n += weight
        self._mu = None
