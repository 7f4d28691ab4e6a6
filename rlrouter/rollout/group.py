"""RolloutGroup: a batch of prompts sharded over N RolloutWorker actors, driven like one local object.

``group.rollout(items, n_samples, seed, step)`` splits the items into contiguous shards (so the
item-major order GRPO groups rely on is kept), runs every shard concurrently and concatenates the
trajectories. A worker that dies mid-batch is restarted by Ray (``max_restarts``), gets the last
synced weights again, and its shard is retried (issue 8).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from rlrouter.distributed.resources import ResourceSpec
from rlrouter.rollout.env import Trajectory
from rlrouter.rollout.worker import RolloutWorker
from rlrouter.sync.transports import SyncPayload, apply_payload

log = logging.getLogger(__name__)


class _Worker(RolloutWorker):
    """The actor class: a RolloutWorker that can apply sync payloads."""

    def apply_sync(self, payload: SyncPayload) -> float:
        return apply_payload(self, payload)


def shard(n: int, k: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges splitting n items over k workers, sizes differing by at most 1."""
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


class RolloutGroup:
    def __init__(self, model: str, engine: dict[str, Any], env: dict[str, Any], pool: dict[str, Any] | None,
                 resources: ResourceSpec, max_restarts: int = 3, max_retries: int = 2):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rlrouter.distributed.resources import rollout_placement_group

        self.pg = rollout_placement_group(resources)
        role = resources.rollout
        actor = ray.remote(_Worker)
        self.max_retries = max_retries
        self.workers = [
            actor.options(num_cpus=role.num_cpus, num_gpus=role.num_gpus, max_restarts=max_restarts,
                          max_concurrency=1, name=None,
                          scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i)
                          ).remote(model, engine, env, pool, i)
            for i in range(role.num_workers)]
        self._ray = ray
        self.last_payload: SyncPayload | None = None
        self.restarts = 0
        t0 = time.perf_counter()
        self.infos = ray.get([w.info.remote() for w in self.workers])
        self.ready_s = time.perf_counter() - t0

    def __len__(self) -> int:
        return len(self.workers)

    def _call_with_retry(self, i: int, method: str, *args: Any) -> Any:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        for attempt in range(self.max_retries + 1):
            try:
                return self._ray.get(getattr(self.workers[i], method).remote(*args))
            except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
                if attempt == self.max_retries:
                    raise
                self.restarts += 1
                log.warning("rollout worker %d failed (%s); waiting for its restart, retry %d",
                            i, type(e).__name__, attempt + 1)
                self._await_restart(i)

    def _await_restart(self, i: int, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self._ray.get(self.workers[i].ping.remote(), timeout=30)
                break
            except Exception:  # noqa: BLE001 - still restarting
                time.sleep(1.0)
        # a restarted engine serves the base weights: give it the policy it had
        if self.last_payload is not None:
            self._ray.get(self.workers[i].apply_sync.remote(self.last_payload))

    def rollout(self, items: Sequence[dict[str, Any]], n_samples: int, seed: int, step: int,
                temperature: float | None = None) -> list[Trajectory]:
        spans = shard(len(items), len(self.workers))
        refs = {i: self.workers[i].rollout.remote(list(items[a:b]), n_samples, seed, step, a, temperature)
                for i, (a, b) in enumerate(spans) if b > a}
        out: list[Trajectory] = []
        for i, (a, b) in enumerate(spans):
            if b <= a:
                continue
            try:
                out.extend(self._ray.get(refs[i]))
            except Exception as e:  # noqa: BLE001 - retried below if the actor died
                from ray.exceptions import RayActorError

                if not isinstance(e, RayActorError):
                    raise
                self.restarts += 1
                log.warning("rollout worker %d died mid-batch; retrying its shard", i)
                self._await_restart(i)
                out.extend(self._call_with_retry(i, "rollout", list(items[a:b]), n_samples, seed, step, a,
                                                 temperature))
        return out

    def timings(self) -> list[dict[str, float]]:
        return self._ray.get([w.timing.remote() for w in self.workers])

    def sync(self, payload: SyncPayload) -> float:
        """Make every worker serve ``payload``; returns the wall time (workers apply it in parallel)."""
        t0 = time.perf_counter()
        ref = self._ray.put(payload)
        self._ray.get([w.apply_sync.remote(ref) for w in self.workers])
        self.last_payload = payload
        return time.perf_counter() - t0

    def generate_text(self, prompts: list[str], max_tokens: int = 64, temperature: float = 0.0) -> list[dict]:
        spans = shard(len(prompts), len(self.workers))
        refs = [self.workers[i].generate_text.remote(prompts[a:b], max_tokens, temperature)
                for i, (a, b) in enumerate(spans) if b > a]
        return [x for part in self._ray.get(refs) for x in part]

    def generate_ids(self, prompts: list[list[int]], specs: list) -> list[list[int]]:
        spans = shard(len(prompts), len(self.workers))
        refs = [self.workers[i].generate_ids.remote(prompts[a:b], specs[a:b])
                for i, (a, b) in enumerate(spans) if b > a]
        return [x for part in self._ray.get(refs) for x in part]

    def kill_worker(self, i: int) -> None:
        """Fault injection (tests, benchmarks): kill worker ``i`` without preventing its restart."""
        self._ray.kill(self.workers[i], no_restart=False)

    def shutdown(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for w in self.workers:
            try:
                self._ray.kill(w)
            except Exception:  # noqa: BLE001
                pass
        remove_placement_group(self.pg)


class LocalRollout:
    """A RolloutGroup stand-in that runs one RolloutWorker in this process (debugging, single-process runs)."""

    def __init__(self, worker: RolloutWorker):
        self.worker = worker
        self.last_payload: SyncPayload | None = None

    def rollout(self, items: Sequence[dict[str, Any]], n_samples: int, seed: int, step: int,
                temperature: float | None = None) -> list[Trajectory]:
        return self.worker.rollout(list(items), n_samples, seed, step, temperature=temperature)

    def timing(self) -> dict[str, float]:
        return self.worker.timing()

    def sync(self, payload: SyncPayload) -> float:
        self.last_payload = payload
        return apply_payload(self.worker, payload)
