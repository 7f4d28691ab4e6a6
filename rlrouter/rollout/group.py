"""RolloutGroup: a batch of prompts sharded over N RolloutWorker actors, driven like one local object.

``group.rollout(items, n_samples, seed, step)`` splits the items into contiguous shards (so the
item-major order GRPO groups rely on is kept), runs every shard concurrently and concatenates the
trajectories. Only the job's driver calls it: the driver owns the training loop.

The policy version lives here: the group keeps the payload of its last ``sync`` and a serial
number. Every call carries the serial it expects; a worker serving another (one Ray restarted with
the base weights, for any reason) refuses, is re-synced with the current payload and the call is
retried. A worker that dies mid-call is restarted by Ray (``max_restarts``), re-synced, and its
shard retried.

``sync_direct`` is the other way in (``train.sync: nccl``): the weights go GPU to GPU from
the learner's rank 0 into the engines (``rlrouter.sync.nccl``), not through this process, so the group
keeps no payload, only a way to get one (``fallback``, the same version through the object store) for
a worker that restarts. A restart also breaks the NCCL group the engines joined: ``transfer_epoch``
counts restarts, and the sender builds a new group when it changes.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Sequence

from rlrouter.distributed.resources import ResourceSpec
from rlrouter.engine import EngineConfig
from rlrouter.rollout.env import Trajectory
from rlrouter.rollout.worker import RolloutWorker
from rlrouter.sync.transports import PayloadRef, SyncPayload, apply_payload

log = logging.getLogger(__name__)


class StaleWeights(RuntimeError):
    """A worker was asked for one weights serial but serves another (it restarted). One message
    argument only: Ray re-raises it in the driver by rebuilding it from its args."""


class _Worker(RolloutWorker):
    """The actor class: a RolloutWorker that applies sync payloads and checks the serial it serves."""

    serving = 0
    """The group's sync serial this process serves; 0 = the weights it loaded at start."""

    def apply_sync(self, payload: SyncPayload, serial: int) -> float:
        s = apply_payload(self, payload)
        self.serving = serial
        return s

    def mark_serving(self, serial: int, version: int) -> int:
        """After a direct transfer (``RolloutGroup.sync_direct``) put ``version`` into this engine."""
        if self.weights_version != version:
            raise StaleWeights(f"rollout worker holds weights version {self.weights_version}, the transfer "
                               f"was to bring {version}")
        self.serving = serial
        return serial

    def serving_serial(self) -> int:
        return self.serving

    def checked(self, serial: int, method: str, *args: Any) -> Any:
        if self.serving != serial:
            raise StaleWeights(f"rollout worker serves weights serial {self.serving}, expected {serial}")
        return getattr(self, method)(*args)


def worker_spans(n: int, k: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges splitting n items over k workers, sizes differing by at most 1."""
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def tensor_parallel_size(engine: dict[str, Any] | EngineConfig) -> int:
    """The engine's TP size, validated the way the workers will build it (``rlrouter.engine``)."""
    cfg = engine if isinstance(engine, EngineConfig) else EngineConfig(**engine)
    if cfg.tensor_parallel_size > 1 and cfg.resolved_device() == "cpu":
        # the rollout placement group holds one GPU bundle per TP rank; a CPU engine's TP workers are
        # processes of its own (rlrouter.engine), which no bundle accounts for
        raise ValueError("rollout.engine.tensor_parallel_size: a RolloutGroup places tensor-parallel engines "
                         "on GPU bundles only; on CPU keep it 1")
    return cfg.tensor_parallel_size


def worker_actor_options(resources: ResourceSpec, engine: dict[str, Any] | EngineConfig, pg: Any,
                         max_restarts: int = 3) -> list[dict[str, Any]]:
    """Ray actor options for each rollout worker in ``pg``: with tensor parallel size ``tp`` worker i sits on
    bundles [i * tp, (i + 1) * tp) of one GPU each, the way OpenRLHF places its engines (resources.py)."""
    from rlrouter.distributed.resources import rollout_actor_options

    tp = tensor_parallel_size(engine)
    return [{**rollout_actor_options(resources, pg, i, tp), "max_restarts": max_restarts, "max_concurrency": 1}
            for i in range(resources.rollout.num_workers)]


class RolloutGroup:
    def __init__(self, model: str, engine: dict[str, Any], env: dict[str, Any], pool: dict[str, Any] | None,
                 resources: ResourceSpec, max_restarts: int = 3, max_retries: int = 2):
        import ray

        from rlrouter.distributed.resources import rollout_placement_group

        self.tensor_parallel_size = tensor_parallel_size(engine)
        self.autoscale = resources.autoscale
        self.pg = rollout_placement_group(resources, tensor_parallel_size=self.tensor_parallel_size)
        actor = ray.remote(_Worker)
        self.max_retries = max_retries
        self.workers = [actor.options(**opts).remote(model, engine, env, pool, i)
                        for i, opts in enumerate(worker_actor_options(resources, engine, self.pg, max_restarts))]
        self._ray = ray
        self.last_payload: SyncPayload | PayloadRef | None = None
        self._payload_ref: Any = None
        self._fallback: Callable[[], SyncPayload] | None = None
        """``sync_direct``: builds the current version's payload for a worker that restarted."""
        self._direct_version: int | None = None
        self.transfer_epoch = 0
        """Worker restarts so far: a direct transfer's sender rebuilds its group when this changes."""
        self.serial = 0
        """Bumped by each ``sync``; every call expects its workers to serve it."""
        self.restarts = 0
        t0 = time.perf_counter()
        self.infos = ray.get([w.info.remote() for w in self.workers])
        self.ready_s = time.perf_counter() - t0

    def __len__(self) -> int:
        return len(self.workers)

    @property
    def version(self) -> int:
        """The policy version the workers serve (the learner's, from the last sync; 0 = base)."""
        if self._direct_version is not None:
            return self._direct_version
        return self.last_payload.version if self.last_payload is not None else 0

    def _submit(self, i: int, method: str, args: tuple) -> Any:
        return self.workers[i].checked.remote(self.serial, method, *args)

    def _call_all(self, method: str, per_worker: dict[int, tuple]) -> dict[int, Any]:
        """``method(*per_worker[i])`` on each worker i at the current serial, concurrently; a worker that
        died or serves stale weights is re-synced and asked again (``max_retries`` times)."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

        refs = {i: self._submit(i, method, args) for i, args in per_worker.items()}
        out: dict[int, Any] = {}
        for i, args in per_worker.items():
            for attempt in range(self.max_retries + 1):
                try:
                    out[i] = self._ray.get(refs[i])
                    break
                except (StaleWeights, RayActorError, ActorDiedError, ActorUnavailableError, RayTaskError) as e:
                    stale = isinstance(e, StaleWeights) or isinstance(getattr(e, "cause", None), StaleWeights)
                    if attempt == self.max_retries or (isinstance(e, RayTaskError) and not stale
                                                       and not isinstance(e, RayActorError)):
                        raise
                    self.restarts += 1
                    log.warning("rollout worker %d: %s; re-syncing it and retrying its shard (%d)",
                                i, "stale weights" if stale else f"died ({type(e).__name__})",
                                attempt + 1)
                    self._resync(i)
                    refs[i] = self._submit(i, method, args)
        return out

    def _resync(self, i: int, timeout_s: float = 300.0) -> None:
        """Wait until worker i answers (Ray restarts it), then make it serve the current payload."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._ray.get(self.workers[i].ping.remote(), timeout=30)
                break
            except Exception:  # noqa: BLE001 - still restarting
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rollout worker {i} did not come back within {timeout_s:.0f}s") from None
                time.sleep(1.0)
        self.transfer_epoch += 1  # it left any NCCL group the engines had joined
        # never synced (serial 0): the base weights a restarted engine loads are the current policy
        if self._payload_ref is None and self._fallback is not None:
            self.last_payload = self._fallback()  # a direct sync's version, through the object store
            self._payload_ref = self._stored(self.last_payload)
        if self._payload_ref is not None:
            self._ray.get(self.workers[i].apply_sync.remote(self._payload_ref, self.serial))

    def rollout(self, items: Sequence[dict[str, Any]], n_samples: int, seed: int, step: int,
                temperature: float | None = None) -> list[Trajectory]:
        spans = worker_spans(len(items), len(self.workers))
        got = self._call_all("rollout", {i: (list(items[a:b]), n_samples, seed, step, a, temperature)
                                         for i, (a, b) in enumerate(spans) if b > a})
        return [t for i in sorted(got) for t in got[i]]

    def timings(self) -> list[dict[str, float]]:
        return self._ray.get([w.timing.remote() for w in self.workers])

    def _stored(self, payload: SyncPayload | PayloadRef) -> Any:
        """The object-store reference the workers read ``payload`` from: a :class:`PayloadRef`'s own (left on
        the learner's node), else stored from here."""
        return payload.ref if isinstance(payload, PayloadRef) else self._ray.put(payload)

    def sync(self, payload: SyncPayload | PayloadRef) -> float:
        """Make every worker serve ``payload``; returns the wall time (workers apply it in parallel; each
        fetches a :class:`PayloadRef` from the learner's node, not through this process)."""
        from ray.exceptions import RayActorError

        t0 = time.perf_counter()
        self._payload_ref = self._stored(payload)
        self.last_payload = payload
        self._fallback = self._direct_version = None
        self.serial += 1
        refs = [w.apply_sync.remote(self._payload_ref, self.serial) for w in self.workers]
        for i, ref in enumerate(refs):
            try:
                self._ray.get(ref)
            except RayActorError:
                self.restarts += 1
                log.warning("rollout worker %d died during a sync; re-syncing it after its restart", i)
                self._resync(i)
        return time.perf_counter() - t0

    def sync_direct(self, send: Callable[[list[Any], int], dict[str, Any]],
                    fallback: Callable[[], SyncPayload]) -> dict[str, Any]:
        """Make every worker serve weights that ``send(workers, transfer_epoch)`` moves into the engines
        itself (the learner's rank 0 over NCCL: ``LearnerGroup.broadcast_weights``); ``send`` returns at
        least ``{"version": v}``, the version the engines now hold. Then the group records the new
        serial on every worker. ``fallback()`` is called only if a worker restarts before the next sync:
        it must return version v's payload for the object store. Returns ``send``'s dict with
        ``seconds``."""
        t0 = time.perf_counter()
        self.serial += 1
        self.last_payload, self._payload_ref, self._fallback = None, None, fallback
        info = dict(send(list(self.workers), self.transfer_epoch))
        if "error" in info:
            # a receiver died or hung mid-transfer: the sender aborted the group. Bring back the workers
            # that are gone (each restart bumps transfer_epoch, so the sender builds a new group) and retry once
            log.warning("direct weight transfer failed (%s); re-syncing dead workers and retrying", info["error"])
            self._restart_dead_workers()
            self.transfer_epoch += 1  # even with every worker alive (a hang): a fresh group
            info = dict(send(list(self.workers), self.transfer_epoch))
            if "error" in info:
                from rlrouter.sync.nccl import WeightTransferError

                raise WeightTransferError(f"train.sync=nccl: the retry failed too: {info['error']}")
        self._direct_version = int(info["version"])
        for i, w in enumerate(self.workers):
            try:
                self._ray.get(w.mark_serving.remote(self.serial, self._direct_version))
            except Exception as e:  # noqa: BLE001 - died after the transfer, or restarted without it
                self.restarts += 1
                log.warning("rollout worker %d lost the direct transfer (%s); re-syncing it", i, type(e).__name__)
                self._resync(i)
        info["seconds"] = time.perf_counter() - t0
        return info

    def _restart_dead_workers(self, timeout_s: float = 30.0) -> None:
        """Wait for every worker that does not answer a ping (it died; Ray restarts it) to come back, and
        give it the last version through the object store (``_resync``)."""
        for i, w in enumerate(self.workers):
            try:
                self._ray.get(w.ping.remote(), timeout=timeout_s)
                continue
            except Exception:  # noqa: BLE001 - dead, restarting or hung: _resync waits for it
                pass
            self.restarts += 1
            self._resync(i)

    def generate_text(self, prompts: list[str], max_tokens: int = 64, temperature: float = 0.0) -> list[dict]:
        spans = worker_spans(len(prompts), len(self.workers))
        got = self._call_all("generate_text", {i: (prompts[a:b], max_tokens, temperature)
                                               for i, (a, b) in enumerate(spans) if b > a})
        return [x for i in sorted(got) for x in got[i]]

    def generate_ids(self, prompts: list[list[int]], specs: list) -> list[list[int]]:
        spans = worker_spans(len(prompts), len(self.workers))
        got = self._call_all("generate_ids", {i: (prompts[a:b], specs[a:b])
                                              for i, (a, b) in enumerate(spans) if b > a})
        return [x for i in sorted(got) for x in got[i]]

    def next_token_logprobs(self, prompts: list[list[int]], token_ids: list[int], k: int = 20) -> list[list[float]]:
        """``RolloutWorker.next_token_logprobs`` over the workers: the policy's log-prob of each of
        ``token_ids`` as the next token of each prompt (the learning test reads its route probabilities so)."""
        spans = worker_spans(len(prompts), len(self.workers))
        got = self._call_all("next_token_logprobs", {i: (prompts[a:b], list(token_ids), k)
                                                     for i, (a, b) in enumerate(spans) if b > a})
        return [x for i in sorted(got) for x in got[i]]

    def worker_serials(self) -> list[int]:
        """The sync serial each worker serves now (tests, diagnostics)."""
        return self._ray.get([w.serving_serial.remote() for w in self.workers])

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
        if self.autoscale:
            from rlrouter.distributed.resources import release_autoscaler_request

            release_autoscaler_request()


class LocalRollout:
    """A RolloutGroup stand-in that runs one RolloutWorker in this process (debugging, single-process runs)."""

    def __init__(self, worker: RolloutWorker):
        self.worker = worker
        self.last_payload: SyncPayload | PayloadRef | None = None

    def rollout(self, items: Sequence[dict[str, Any]], n_samples: int, seed: int, step: int,
                temperature: float | None = None) -> list[Trajectory]:
        return self.worker.rollout(list(items), n_samples, seed, step, temperature=temperature)

    def timing(self) -> dict[str, float]:
        return self.worker.timing()

    def sync(self, payload: SyncPayload | PayloadRef) -> float:
        self.last_payload = payload
        return apply_payload(self.worker, payload)
