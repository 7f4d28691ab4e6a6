"""The Router-R1 reward's settings as one typed object, read once from a run's reward config.

Every place that scores a route the way the run trained (the training reward, each held-out evaluation, the
fixed routes and the per-task rule) takes its cost weight, cost window and outcome metric from one
``RewardSpec`` (``RouterR1TrainConfig.reward_spec``), not from the reward config dug into again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlrouter.config import to_plain

METRICS = ("em", "f1")


@dataclass(frozen=True)
class RewardSpec:
    """Router-R1's reward: correct -> (1 + format)(1 - alpha) + alpha * cost; wrong -> format."""

    alpha: float = 0.0
    """The cost weight."""
    cost_window: int = 512
    """Recent route costs that set the cost reward's normalisation (without a reference scale)."""
    metric: str = "em"
    """The outcome: exact match (``em``) or token F1 (``f1``)."""

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"reward.alpha: a number in [0, 1], got {self.alpha!r}")
        if isinstance(self.cost_window, bool) or not isinstance(self.cost_window, int) or self.cost_window < 1:
            raise ValueError(f"reward.cost_window: an int >= 1, got {self.cost_window!r}")
        if self.metric not in METRICS:
            raise ValueError(f"reward.metric: one of {METRICS}, got {self.metric!r}")

    @classmethod
    def from_reward(cls, reward: Any) -> RewardSpec:
        """The ``router_r1`` part of a reward config (alone, or inside ``combined``'s ``functions``); the defaults
        for a reward without one."""
        part = _router_r1_part(reward) or {}
        return cls(alpha=float(part.get("alpha", 0.0)), cost_window=int(part.get("cost_window", 512)),
                   metric=str(part.get("metric", "em")))


def _router_r1_part(c: Any) -> dict[str, Any] | None:
    c = to_plain(c)
    if isinstance(c, (list, tuple)):
        return next((f for f in map(_router_r1_part, c) if f is not None), None)
    if isinstance(c, dict) and c.get("name") == "router_r1":
        return {**(c.get("params") or {}), **c}
    if isinstance(c, dict) and c.get("name") == "combined":
        return _router_r1_part(c.get("functions") or [])
    return None
