"""Resources as data: each role (rollout, learner) says how many workers of what; one module makes them real.

verl-style: config declares ``role -> {num_workers, num_cpus, num_gpus}`` and whether rollout and
learner share devices (``colocate``). Here they become a placement group for the rollout workers and
a Ray Train ``ScalingConfig`` for the learners.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RoleSpec:
    """One role's workers. ``num_gpus`` may be fractional when roles are colocated on one GPU."""

    num_workers: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"resources.*.num_workers: must be >= 1, got {self.num_workers}")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError("resources.*.num_cpus / num_gpus: must be >= 0")

    def bundle(self) -> dict[str, float]:
        b = {"CPU": float(self.num_cpus)}
        if self.num_gpus:
            b["GPU"] = float(self.num_gpus)
        return b


@dataclass
class ResourceSpec:
    rollout: RoleSpec = field(default_factory=RoleSpec)
    learner: RoleSpec = field(default_factory=RoleSpec)
    colocate: bool = False
    """Rollout and learner on the same GPUs (fractional num_gpus); False puts them on separate devices."""
    strategy: str = "PACK"
    """Placement strategy for the rollout bundles: PACK (fewest nodes) or SPREAD."""

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):
            self.rollout = RoleSpec(**self.rollout)
        if isinstance(self.learner, dict):
            self.learner = RoleSpec(**self.learner)
        if self.strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"resources.strategy: unknown {self.strategy!r}")
        if self.colocate and (self.rollout.num_gpus + self.learner.num_gpus > 1.0 + 1e-9) \
                and self.rollout.num_gpus and self.learner.num_gpus:
            raise ValueError("resources.colocate: rollout.num_gpus + learner.num_gpus must be <= 1 per GPU")

    @property
    def use_gpu(self) -> bool:
        return self.learner.num_gpus > 0


def rollout_placement_group(spec: ResourceSpec, timeout_s: float = 120.0):
    """Reserve the rollout workers' bundles; fails with the missing resources named."""
    import ray
    from ray.util.placement_group import placement_group

    bundles = [spec.rollout.bundle() for _ in range(spec.rollout.num_workers)]
    pg = placement_group(bundles, strategy=spec.strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        raise RuntimeError(f"resources.rollout: could not reserve {bundles} within {timeout_s:.0f}s; "
                           f"cluster has {ray.available_resources()}")
    return pg


def learner_scaling_config(spec: ResourceSpec) -> Any:
    from ray.train import ScalingConfig

    res = {"CPU": spec.learner.num_cpus}
    if spec.learner.num_gpus:
        res["GPU"] = spec.learner.num_gpus
    return ScalingConfig(num_workers=spec.learner.num_workers, use_gpu=spec.use_gpu, resources_per_worker=res)
