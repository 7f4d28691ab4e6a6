"""Releasing a retrained router: a new version served beside the current one, a canary share of its
requests, a comparison on live feedback with an interval, and a rule that promotes or rolls back.

Pure logic (no Ray, no HTTP): :class:`~rlrouter.serving.served_routers.ServedRouters` holds one
:class:`Release` per router with a canary in progress and feeds it the reward of every feedback on a decision
either version made. The reward is the traffic export's: the feedback's score (``win`` 1, ``tie`` 0.5,
``loss`` 0, a follow-up label, a Router-R1 reward clipped to [0, 1]; ``traffic_export.feedback_score``) minus
``cost_weight`` x the call's cost in thousandths of a dollar (``traffic_router.reward_of``), so the canary
measures what the off-policy estimate before it predicted.

The rule (``ReleaseRule``), checked after each feedback once both versions hold ``min_feedback`` rewards:

- promote when the lower end of the ``level`` interval of (canary - current) is above ``min_gain``;
- roll back when its upper end is below ``min_gain``, or when both versions reach ``max_feedback`` and it is
  still undecided (a canary must show its gain, not merely fail to show a loss).

The interval is the normal one of a difference of two independent means (Welch's standard error). With
``auto: false`` the rule only reports its verdict, and an operator promotes or rolls back.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Mapping

CANARY, PROMOTED, ROLLED_BACK = "canary", "promoted", "rolled_back"


@dataclass(frozen=True)
class ReleaseRule:
    """``serving.release`` (defaults of every release) and a release request's overrides."""

    canary_share: float = 0.1
    """The share of the router's requests the new version decides while the canary runs."""
    min_feedback: int = 50
    """Rewards each version needs before the rule decides."""
    max_feedback: int = 2000
    """Rewards each version may collect; still undecided then: roll back."""
    min_gain: float = 0.0
    """Promote when the interval of (canary - current) lies above this; roll back when below it."""
    level: float = 0.95
    cost_weight: float = 0.0
    """Reward = score - cost_weight x cost in thousandths of a dollar (0: the feedback's score alone)."""
    auto: bool = True
    """Apply the verdict when it comes (false: report it; ``POST /v1/routers/<name>/promote`` or ``rollback``)."""

    def __post_init__(self) -> None:
        def bad(name: str, what: str) -> ValueError:
            return ValueError(f"release.{name}: {what}, got {getattr(self, name)!r}")

        if not _number(self.canary_share) or not 0.0 < self.canary_share < 1.0:
            raise bad("canary_share", "a share in (0, 1)")
        for name in ("min_feedback", "max_feedback"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise bad(name, "an int >= 2")
        if self.max_feedback < self.min_feedback:
            raise bad("max_feedback", f"at least min_feedback ({self.min_feedback})")
        if not _number(self.min_gain):
            raise bad("min_gain", "a number")
        if not _number(self.level) or not 0.5 <= self.level < 1.0:
            raise bad("level", "a confidence level in [0.5, 1)")
        if not _number(self.cost_weight) or self.cost_weight < 0:
            raise bad("cost_weight", "a number >= 0")
        if not isinstance(self.auto, bool):
            raise bad("auto", "true or false")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, base: ReleaseRule | None = None) -> ReleaseRule:
        d = dict(d or {})
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"release: unknown fields {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**{**asdict(base or cls()), **d})


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


@dataclass
class ArmStats:
    """Running count, mean and sum of squared deviations (Welford) of one version's rewards."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def var(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else math.inf

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        z = NormalDist().inv_cdf(0.5 + level / 2)
        half = z * math.sqrt(self.var / self.n) if self.n > 1 else math.inf
        return {"n": self.n, "mean": self.mean if self.n else None,
                "lo": self.mean - half if math.isfinite(half) else None,
                "hi": self.mean + half if math.isfinite(half) else None}


def difference(current: ArmStats, canary: ArmStats, level: float) -> dict[str, float] | None:
    """(canary - current) with its ``level`` normal interval; None before each has 2 rewards."""
    if current.n < 2 or canary.n < 2:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    se = math.sqrt(current.var / current.n + canary.var / canary.n)
    d = canary.mean - current.mean
    return {"mean": d, "lo": d - z * se, "hi": d + z * se}


@dataclass
class Release:
    """One canary: ``candidate`` (the new version) against ``current`` on router ``router``."""

    router: str
    current: str
    candidate: str
    rule: ReleaseRule
    started: float = field(default_factory=time.time)
    state: str = CANARY
    ended: float | None = None
    reason: str | None = None
    stats: dict[str, ArmStats] = field(default_factory=dict)
    late: int = 0
    """Rewards that arrived after the verdict (decisions in flight at the swap): counted, never dropped."""
    no_cost: int = 0
    """Rewards whose call cost was unknown to the app (counted at cost 0)."""

    def __post_init__(self) -> None:
        self.stats = {self.current: ArmStats(), self.candidate: ArmStats()}

    def record(self, version: str, reward: float, cost_known: bool = True) -> None:
        if version not in self.stats:
            return
        self.stats[version].add(float(reward))
        self.no_cost += not cost_known
        if self.state != CANARY:
            self.late += 1

    def verdict(self) -> tuple[str, str] | None:
        """``(promote | rollback, why)`` once the rule decides; None while it waits."""
        cur, can = self.stats[self.current], self.stats[self.candidate]
        r = self.rule
        if min(cur.n, can.n) < r.min_feedback:
            return None
        d = difference(cur, can, r.level)
        assert d is not None
        span = f"canary - current {d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] over {can.n} / {cur.n} rewards"
        if d["lo"] > r.min_gain:
            return "promote", f"{span}: above min_gain {r.min_gain:g}"
        if d["hi"] < r.min_gain:
            return "rollback", f"{span}: below min_gain {r.min_gain:g}"
        if min(cur.n, can.n) >= r.max_feedback:
            return "rollback", f"{span}: undecided at max_feedback {r.max_feedback}"
        return None

    def end(self, state: str, reason: str) -> None:
        self.state, self.reason, self.ended = state, reason, time.time()

    def to_dict(self) -> dict[str, Any]:
        lvl = self.rule.level
        return {"router": self.router, "current": self.current, "candidate": self.candidate, "state": self.state,
                "started": self.started, "ended": self.ended, "reason": self.reason, "rule": asdict(self.rule),
                "versions": {v: s.to_dict(lvl) for v, s in self.stats.items()},
                "difference": difference(self.stats[self.current], self.stats[self.candidate], lvl),
                "late_feedback": self.late, "feedback_without_cost": self.no_cost}
