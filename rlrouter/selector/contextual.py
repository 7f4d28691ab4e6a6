"""Linear Thompson sampling on query embeddings, one Bayesian ridge model per candidate.

Beyond the VSR peer (issue 4, "Contextual"): each candidate keeps ``A = lambda I + sum w x x'`` and
``b = sum w r x`` over the contexts x (the L2-normalised MiniLM embedding with a constant 1 appended)
and rewards r in [0, 1] it was given. Its posterior is N(mu = A^-1 b, v^2 A^-1) (Agrawal & Goyal
2013). The selector only needs the draw of ``x' theta`` for the current x, and that scalar is
exactly N(x' mu, v^2 x' A^-1 x), so a decision costs O(d^2) per candidate instead of the O(d^3)
of drawing the whole theta. ``A^-1`` is kept directly and updated with Sherman-Morrison.
"""

from __future__ import annotations

import math
import random

import numpy as np


def context_vector(embedding: np.ndarray | list[float]) -> np.ndarray:
    """The feature vector of a query: unit-norm embedding plus an intercept term. Shape (d + 1,)."""
    e = np.asarray(embedding, dtype=np.float64).reshape(-1)
    if e.size == 0 or not np.all(np.isfinite(e)):
        raise ValueError("embedding: expected a non-empty vector of finite numbers")
    n = float(np.linalg.norm(e))
    if n > 0:
        e = e / n
    return np.concatenate([e, [1.0]])


class LinearThompsonArm:
    """Bayesian linear regression of one candidate's reward on the context vector."""

    def __init__(self, dim: int, prior: float = 1.0):
        if dim < 1:
            raise ValueError(f"dim: expected >= 1, got {dim}")
        self.dim = dim
        self.prior = float(prior)
        self.a_inv = np.eye(dim) / self.prior  # (d, d)
        self.b = np.zeros(dim)  # (d,)
        self.n = 0.0  # total weight of the updates
        self._mu: np.ndarray | None = None

    @property
    def mu(self) -> np.ndarray:
        if self._mu is None:
            self._mu = self.a_inv @ self.b
        return self._mu

    def mean_and_std(self, x: np.ndarray) -> tuple[float, float]:
        """Posterior mean and standard deviation (before the noise scale v) of x' theta."""
        ax = self.a_inv @ x
        return float(x @ self.mu), math.sqrt(max(float(x @ ax), 0.0))

    def sample(self, x: np.ndarray, noise: float, rng: random.Random) -> float:
        """One Thompson draw of the expected reward at x."""
        mean, std = self.mean_and_std(x)
        return mean + noise * std * rng.gauss(0.0, 1.0)

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
