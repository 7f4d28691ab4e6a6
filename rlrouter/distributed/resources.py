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

Placement on a cluster that can grow (``resources.autoscale: true``, the ``gpu_cluster`` preset for
``cluster.yaml``, whose GPU workers go from ``min_workers`` to ``max_workers``): what the run needs and
the cluster lacks is asked of the autoscaler at once (``ray.autoscaler.sdk.request_resources``, every
rollout bundle and every learner rank's bundle), and placement waits up to
``resources.placement_timeout_s`` for the nodes to join. On a fixed-size cluster a run that cannot fit
fails at once, naming what is short and the config keys that set it.
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
    """Must be false: rollout and learner on the same GPUs (vLLM sleep mode) is not built."""
    strategy: str = "PACK"
    """Placement strategy for the rollout bundles: PACK (fewest nodes) or SPREAD."""
    ray_train: bool = True
    """False: the learner runs in this process as one rank (GMTRouter and intent jobs; tests, debugging)."""
    autoscale: bool = False
    """True: the cluster has an autoscaler that can add nodes (cluster.yaml): ask it for what is short and
    wait; False: a fixed-size cluster, where a run that does not fit fails at once."""
    placement_timeout_s: float = 120.0
    """How long placement waits for the resources (with ``autoscale``: for new nodes to boot and join)."""

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):
            self.rollout = RoleSpec(**self.rollout)
        if isinstance(self.learner, dict):
            self.learner = RoleSpec(**self.learner)
        if self.strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"resources.strategy: unknown {self.strategy!r}")
        if not isinstance(self.autoscale, bool):
            raise ValueError(f"resources.autoscale: true or false, got {self.autoscale!r}")
        if not self.placement_timeout_s > 0:
            raise ValueError(f"resources.placement_timeout_s: must be > 0, got {self.placement_timeout_s!r}")
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

    def learner_bundle(self) -> dict[str, float]:
        """One learner rank's resources (Ray Train's ``resources_per_worker``)."""
        return self.learner.bundle()

    def all_bundles(self, tensor_parallel_size: int = 1) -> list[dict[str, float]]:
        """Every bundle the run places: the rollout placement group's, then one per learner rank. This is
        what the autoscaler is asked for: bundles, not totals, so it adds nodes they fit on."""
        return (self.rollout_bundles(tensor_parallel_size)
                + [self.learner_bundle() for _ in range(self.learner.num_workers)])

    def required(self, tensor_parallel_size: int = 1) -> dict[str, float]:
        """What the rollout workers and the learner ranks need from the cluster, in all."""
        need: dict[str, float] = {"CPU": 0.0, "GPU": 0.0}
        for b in self.all_bundles(tensor_parallel_size):
            for k, v in b.items():
                need[k] = need.get(k, 0.0) + v
        return need


def shortfall(need: dict[str, float], cluster: dict[str, float]) -> dict[str, tuple[float, float]]:
    """``{resource: (needed, the cluster has)}`` for every resource the cluster has too little of."""
    return {k: (v, cluster.get(k, 0.0)) for k, v in need.items() if v > cluster.get(k, 0.0) + 1e-9}


def describe_shortfall(short: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{k}: need {v:g}, cluster has {have:g}, short {v - have:g}" for k, (v, have) in short.items())


FIT_KEYS = ("lower resources.rollout.num_workers / resources.learner.num_workers (or their num_cpus / num_gpus); "
            "for an embedded cluster raise ray.num_cpus / ray.num_gpus; for cluster.yaml raise "
            "available_node_types.gpu_worker.min_workers, or set resources.autoscale=true so the autoscaler "
            "adds workers up to max_workers")


def check_fits(spec: ResourceSpec, cluster: dict[str, float], tensor_parallel_size: int = 1) -> dict[str, tuple[float, float]]:
    """What the run lacks on ``cluster`` (``shortfall``). On a fixed-size cluster (``autoscale`` false)
    a shortfall fails now, naming it, rather than wait on a placement group that can never be placed;
    with ``autoscale`` it is returned, for the autoscaler to fill."""
    short = shortfall(spec.required(tensor_parallel_size), cluster)
    if short and not spec.autoscale:
        raise RuntimeError(f"resources: rollout ({spec.rollout.num_workers} x TP {tensor_parallel_size}) + learner "
                           f"({spec.learner.num_workers}) do not fit this Ray cluster ({describe_shortfall(short)}) "
                           f"and resources.autoscale is false; {FIT_KEYS}")
    return short


def request_from_autoscaler(spec: ResourceSpec, tensor_parallel_size: int = 1) -> list[dict[str, float]]:
    """Ask the autoscaler for every bundle of the run (it adds the nodes that are missing; the request
    replaces any earlier one and stays until ``release_autoscaler_request``). Returns the bundles."""
    from ray.autoscaler.sdk import request_resources

    bundles = spec.all_bundles(tensor_parallel_size)
    request_resources(bundles=bundles)
    return bundles


def release_autoscaler_request() -> None:
    """Withdraw the run's request, so idle nodes can be released after ``idle_timeout_minutes``."""
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=[])


def wait_for_cluster(spec: ResourceSpec, tensor_parallel_size: int, deadline: float, poll_s: float = 2.0,
                     cluster_resources: Any = None, sleep: Any = None, clock: Any = None) -> None:
    """With ``autoscale``: wait until the cluster holds everything the run needs (the learner ranks too:
    Ray Train starts its worker group with a short timeout of its own). Raises ``PlacementTimeout``
    naming what is still short at ``deadline`` (a ``time.monotonic`` value)."""
    import time

    if cluster_resources is None:
        import ray

        cluster_resources = ray.cluster_resources
    sleep, clock = sleep or time.sleep, clock or time.monotonic
    need = spec.required(tensor_parallel_size)
    while True:
        short = shortfall(need, cluster_resources())
        if not short:
            return
        if clock() >= deadline:
            raise PlacementTimeout(
                f"resources: the autoscaler did not add {describe_shortfall(short)} within "
                f"resources.placement_timeout_s={spec.placement_timeout_s:g}s; check `ray status` and the "
                "autoscaler log (/tmp/ray/session_latest/logs/monitor.*) for launch errors, raise "
                "available_node_types.gpu_worker.max_workers in cluster.yaml if it is reached, or raise "
                "resources.placement_timeout_s")
        sleep(poll_s)


class PlacementTimeout(RuntimeError):
    """Placement waited ``resources.placement_timeout_s`` and the resources did not come."""


def rollout_placement_group(spec: ResourceSpec, timeout_s: float | None = None, tensor_parallel_size: int = 1,
                            announce: Any = print):
    """Reserve the rollout workers' bundles; fails with the missing resources named.

    The whole run's needs (rollout and learner) are checked against the cluster first: a fixed-size
    cluster that cannot hold them fails at once instead of after the timeout (or, for the learner,
    never); a cluster with an autoscaler (``resources.autoscale``) is asked for them, and this waits
    up to ``resources.placement_timeout_s`` for the nodes.
    """
    import time

    import ray
    from ray.util.placement_group import placement_group

    timeout_s = spec.placement_timeout_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    short = check_fits(spec, ray.cluster_resources(), tensor_parallel_size)
    if spec.autoscale:
        bundles_all = request_from_autoscaler(spec, tensor_parallel_size)
        if short:
            announce(f"resources: the cluster lacks {describe_shortfall(short)}; asked the autoscaler for "
                     f"{len(bundles_all)} bundles, waiting up to {timeout_s:.0f}s for nodes")
    bundles = spec.rollout_bundles(tensor_parallel_size)
    pg = placement_group(bundles, strategy=spec.strategy)
    ready, _ = ray.wait([pg.ready()], timeout=max(0.0, deadline - time.monotonic()))
    if not ready:
        ray.util.remove_placement_group(pg)
        raise PlacementTimeout(f"resources.rollout: could not reserve {bundles} within resources.placement_timeout_s="
                               f"{timeout_s:g}s; cluster has {ray.available_resources()} available "
                               f"(other runs may hold the rest)")
    if spec.autoscale:
        wait_for_cluster(spec, tensor_parallel_size, deadline)
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
