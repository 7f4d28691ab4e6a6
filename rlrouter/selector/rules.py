"""The closed-form rules of the rl_driven selector, one small function each.

They are kept apart from the stateful selector so that every rule can be checked against
hand-computed numbers, and so that the selector reads as a composition of them:

- Beta updates: win -> alpha += w, loss -> beta += w, tie -> both += w/2; a scalar reward r in [0, 1]
  is a fractional win (alpha += w r, beta += w (1 - r)), the usual Bernoulli trick for Thompson
  sampling with bounded rewards (Agrawal & Goyal 2012, Sec. 2).
- Personalization: the Beta *parameters* are blended, alpha = (1 - b) alpha_g + b alpha_u.
- Epsilon decay: eps = max(min_exploration, exploration_rate * exploration_decay ** (selections / 100)).
- Session context: score = (1 - w) score + w * win_rate_in_session.
- Cost awareness: score * (1 + (1 - normalised_cost) * cost_weight), cost min-max normalised over
  the known candidate prices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

OUTCOMES = ("win", "loss", "tie")


@dataclass(frozen=True)
class Beta:
    """Beta(alpha, beta) parameters of one candidate's win probability."""

    alpha: float = 1.0
    beta: float = 1.0

    @property
    def mean(self) -> float:
        s = self.alpha + self.beta
        return 0.5 if s <= 0 else self.alpha / s

    @property
    def variance(self) -> float:
        s = self.alpha + self.beta
        return 0.0 if s <= 0 else self.alpha * self.beta / (s * s * (s + 1.0))


def blend(base: Beta, other: Beta, b: float) -> Beta:
    """alpha = (1 - b) alpha_base + b alpha_other, and the same for beta (VSR ``blendPreferences``)."""
    return Beta((1.0 - b) * base.alpha + b * other.alpha, (1.0 - b) * base.beta + b * other.beta)


def outcome_delta(outcome: str, weight: float = 1.0) -> tuple[float, float]:
    """(d_alpha, d_beta) of one outcome for the candidate it is about."""
    if outcome == "win":
        return weight, 0.0
    if outcome == "loss":
        return 0.0, weight
    if outcome == "tie":
        return 0.5 * weight, 0.5 * weight
    raise ValueError(f"outcome: expected one of {OUTCOMES}, got {outcome!r}")


def reward_delta(reward: float, weight: float = 1.0) -> tuple[float, float]:
    """(d_alpha, d_beta) of a bounded reward: a fractional win with r clipped to [0, 1]."""
    if not math.isfinite(reward):
        raise ValueError(f"reward: expected a finite number, got {reward!r}")
    r = min(1.0, max(0.0, reward))
    return weight * r, weight * (1.0 - r)


def exploration_rate(selections: int, rate: float = 0.3, decay: float = 0.99, minimum: float = 0.05) -> float:
    """Epsilon after ``selections`` selections: the rate decays by ``decay`` per 100 selections."""
    return max(minimum, rate * decay ** (selections / 100.0))


def session_adjust(score: float, win_rate: float | None, weight: float) -> float:
    """Blend a score with the candidate's win rate in this session; no session history: unchanged."""
    if win_rate is None or weight <= 0:
        return score
    return (1.0 - weight) * score + weight * win_rate


def normalised_cost(model: str, costs: Mapping[str, float]) -> float | None:
    """(cost - min) / (max - min) over the known prices; None when unknown or all prices are equal."""
    if model not in costs or len(costs) < 2:
        return None
    lo, hi = min(costs.values()), max(costs.values())
    if hi == lo:
        return None
    return (costs[model] - lo) / (hi - lo)


def cost_bonus(score: float, norm_cost: float | None, weight: float) -> float:
    """score * (1 + (1 - normalised cost) * weight): the cheapest candidate gets the full bonus."""
    if norm_cost is None or weight <= 0:
        return score
    return score * (1.0 + (1.0 - norm_cost) * weight)
