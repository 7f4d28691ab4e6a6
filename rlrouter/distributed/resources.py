"""Resources as data: each role (rollout, learner) says how many workers of what; one module makes them real.

verl-style: config declares ``role -> {num_workers, num_cpus, num_gpus}``. Here they become a
placement group for the rollout workers and a Ray Train ``ScalingConfig`` for the learners.

Tensor parallel engines are placed the way OpenRLHF places them: one placement group for all
engines, one ``{GPU: 1}`` bundle per TP rank; the engine's actor sits on its first bundle without a
GPU of its own and captures its child tasks, and vLLM's Ray executor puts its TP workers on exactly
that engine's bundles (``VLLM_RAY_BUNDLE_INDICES``) instead of asking Ray for a placement group of
its own, which could never be placed beside ours.

Rollout and learner always get separate devices: colocating them (verl's hybrid engine, vLLM sleep
mode between rollout and update) is not built, so ``colocate: true`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUNDLE_INDICES_ENV = "VLLM_RAY_BUNDLE_INDICES"


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
    """Must be false: rollout and learner on the same GPUs (vLLM sleep mode) is not built (issue 14)."""
    strategy: str = "PACK"
    """Placement strategy for the rollout bundles: PACK (fewest nodes) or SPREAD."""
    ray_train: bool = True
    """False: the learner runs in this process as one rank (GMTRouter and intent jobs; tests, debugging)."""

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):
            self.rollout = RoleSpec(**self.rollout)
        if isinstance(self.learner, dict):
            self.learner = RoleSpec(**self.learner)
        if self.strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"resources.strategy: unknown {self.strategy!r}")
        if self.colocate:
            raise ValueError("resources.colocate: colocated rollout and learner (vLLM sleep mode) is not built; "
                             "give them separate GPUs (resources=gpu_cluster), see docs/gpu.md")

    @property
    def use_gpu(self) -> bool:
        return self.learner.num_gpus > 0


    def rollout_bundles(self, tensor_parallel_size: int = 1) -> list[dict[str, float]]:
        """The rollout placement group's bundles: one per worker, or one GPU bundle per TP rank."""
        tp = tensor_parallel_size
        if tp == 1:
            return [self.rollout.bundle() for _ in range(self.rollout.num_workers)]
        if self.rollout.num_gpus != 1:
            raise ValueError(f"resources.rollout.num_gpus: must be 1 (a GPU per TP rank) with tensor_parallel_size={tp}, "
                             f"got {self.rollout.num_gpus}")
        first = {"CPU": float(self.rollout.num_cpus), "GPU": 1.0}
        return [first if r == 0 else {"GPU": 1.0} for _ in range(self.rollout.num_workers) for r in range(tp)]

    def required(self, tensor_parallel_size: int = 1) -> dict[str, float]:
        """What the rollout workers and the learner ranks need from the cluster, in all."""
        need = {"CPU": self.learner.num_cpus * self.learner.num_workers,
                "GPU": self.learner.num_gpus * self.learner.num_workers}
        for b in self.rollout_bundles(tensor_parallel_size):
            for k, v in b.items():
                need[k] += v
        return need


def check_fits(spec: ResourceSpec, cluster: dict[str, float], tensor_parallel_size: int = 1) -> None:
    """Fail now, naming what is short, rather than wait on a placement group that can never be placed."""
    need = spec.required(tensor_parallel_size)
    short = {k: (v, cluster.get(k, 0.0)) for k, v in need.items() if v > cluster.get(k, 0.0) + 1e-9}
    if short:
        msg = ", ".join(f"{k}: need {v:g}, cluster has {have:g}" for k, (v, have) in short.items())
        raise RuntimeError(f"resources: rollout ({spec.rollout.num_workers} x TP {tensor_parallel_size}) + learner "
                           f"({spec.learner.num_workers}) do not fit this Ray cluster ({msg}); lower resources.*, or "
                           "raise ray.num_cpus / ray.num_gpus for an embedded cluster")


def rollout_placement_group(spec: ResourceSpec, timeout_s: float = 120.0, tensor_parallel_size: int = 1):
    """Reserve the rollout workers' bundles; fails with the missing resources named.

    The whole run's needs (rollout and learner) are checked against the cluster first, so a run that
    cannot fit fails at once instead of after the timeout (or, for the learner, never).
    """
    import ray
    from ray.util.placement_group import placement_group

    check_fits(spec, ray.cluster_resources(), tensor_parallel_size)
    bundles = spec.rollout_bundles(tensor_parallel_size)
    pg = placement_group(bundles, strategy=spec.strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        raise RuntimeError(f"resources.rollout: could not reserve {bundles} within {timeout_s:.0f}s; "
                           f"cluster has {ray.available_resources()}")
    return pg


def rollout_actor_options(spec: ResourceSpec, pg: Any, worker_index: int, tensor_parallel_size: int = 1) -> dict:
    """Ray actor options for rollout worker ``worker_index`` in ``pg`` (``rollout_placement_group``)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    tp = tensor_parallel_size
    if tp == 1:
        return {"num_cpus": spec.rollout.num_cpus, "num_gpus": spec.rollout.num_gpus,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=worker_index)}
    first = worker_index * tp
    return {"num_cpus": spec.rollout.num_cpus, "num_gpus": 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=first,
                                                                    placement_group_capture_child_tasks=True),
            "runtime_env": {"env_vars": {BUNDLE_INDICES_ENV: ",".join(str(first + r) for r in range(tp))}}}


def learner_scaling_config(spec: ResourceSpec) -> Any:
    from ray.train import ScalingConfig

    res = {"CPU": spec.learner.num_cpus}
    if spec.learner.num_gpus:
        res["GPU"] = spec.learner.num_gpus
    return ScalingConfig(num_workers=spec.learner.num_workers, use_gpu=spec.use_gpu, resources_per_worker=res)
