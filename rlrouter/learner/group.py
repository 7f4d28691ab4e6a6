"""The learner ranks as one object the driver calls: ``LearnerGroup`` (Ray Train) or ``LocalLearners``.

Both answer the same calls, each taking the batch already split into one shard per rank:
``start`` (restore, report where the ranks stand), ``sft_step``, ``train_step``, ``sync_payload``
(from rank 0), ``broadcast_weights`` (rank 0 sends to the engines itself: ``train.sync: nccl``),
``save_checkpoint`` and ``close``. A rank (``LearnerRank``) keeps the model, the
optimizer and the DDP state between calls; the driver (``rlrouter.trainer.router_r1.RouterR1Trainer``) owns
the loop, the rollouts and the rewards.

``LearnerGroup`` runs its ranks under Ray Train (``rlrouter.distributed.launcher``): gloo on CPU,
NCCL on GPU, ``FailureConfig`` restarts from the last checkpoint. The ranks are long-lived and
commanded through ``rlrouter.distributed.commanded``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from rlrouter.distributed.commanded import CommandedWorkers, serve_commands
from rlrouter.distributed.launcher import RayTrainSession, RunSpec, Session, make_trainer, setup_worker_threads
from rlrouter.distributed.resources import ResourceSpec
from rlrouter.learner.checkpoint import (check_visible, create_folder, latest_checkpoint, load_checkpoint,
                                         load_weights, parent, save_checkpoint)
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.learner.learner import Learner
from rlrouter.storage import join, train_storage_path
from rlrouter.sync.transports import PayloadRef, make_payload

log = logging.getLogger(__name__)


@dataclass
class RankState:
    """Where a rank stands after it started: the checkpoint it restored (if any)."""

    step: int = 0
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    """The driver's state saved with the checkpoint (the reward's cost window)."""
    checkpoint: str | None = None


def mean_metrics(per_rank: Sequence[dict[str, float]]) -> dict[str, float]:
    """Ranks' metrics combined: the mean, the max for ``*_max`` keys."""
    keys = sorted({k for m in per_rank for k in m})
    out = {}
    for k in keys:
        vals = [float(m[k]) for m in per_rank if k in m]
        out[k] = max(vals) if k.endswith("_max") else float(np.mean(vals))
    return out


class LearnerRank:
    """One learner rank: a ``Learner`` plus the commands the driver sends it."""

    def __init__(self, train: RouterR1TrainConfig, session: Any):
        import torch

        torch.manual_seed(train.seed)
        self.train, self.session = train, session
        self.learner = Learner(train.learner_cfg, rank=session.rank, world_size=session.world_size,
                               device=session.device)

    def restore(self) -> RankState:
        """The run's latest complete checkpoint in its checkpoint folder (a group that Ray Train restarted
        continues from there, on whatever node it now runs), else ``train.resume_from``, else a fresh start."""
        check_visible(self.train.checkpoints, self.session.rank)
        path = latest_checkpoint(self.train.checkpoints) or self.train.resume_from
        if not path:
            if self.train.init_from:
                load_weights(self.train.init_from, self.learner)
                log.info("rank %d: policy weights from %s", self.session.rank, self.train.init_from)
            return RankState()
        state = load_checkpoint(path, self.learner)
        log.info("rank %d resumed from %s at step %d", self.session.rank, path, state["step"])
        return RankState(step=int(state["step"]), version=self.learner.version, extra=state.get("extra", {}),
                         checkpoint=str(path))

    def sft_step(self, shard: list[Any], lr: float | None) -> dict[str, float]:
        return self.learner.sft_step(shard, lr=lr)

    def train_step(self, shard: list[Any], rewards: list[float], pad_to: int,
                   well_formed: list[bool] | None = None) -> dict[str, float]:
        return self.learner.train_step(shard, rewards, pad_to=pad_to, well_formed=well_formed)

    def reset_reference(self) -> None:
        """RL starts here: the KL reference is the current policy and the optimizer's moments start fresh."""
        self.learner.set_reference_to_current()
        self.learner.reset_moments()

    def sync_payload(self, kind: str, bucket_mb: float) -> Any:
        return make_payload(kind, self.learner, self.learner.version, bucket_mb)

    def broadcast_weights(self, workers: list[Any], tensor_parallel_size: int, epoch: int,
                          sync_factory: Any = None) -> dict[str, Any]:
        """Rank 0: send the merged weights to the engines of ``workers`` over NCCL (``rlrouter.sync.nccl``).
        The transfer group is built at the first call and again whenever ``epoch`` (the rollout group's
        count of worker restarts) changes: a restarted engine is no longer in the old group. A transfer
        that fails or times out (``train.sync_timeout_s``) returns ``{"error": ...}`` instead of killing
        the rank, and the next call builds a new group.
        ``sync_factory`` replaces ``NcclWeightSync`` (tests)."""
        from rlrouter.sync.nccl import WeightTransferError

        if getattr(self, "_transfer", None) is None or self._transfer_epoch != epoch:
            if getattr(self, "_transfer", None) is not None:
                self._transfer.close()
            if sync_factory is None:
                from rlrouter.sync.nccl import NcclWeightSync as sync_factory
            self._transfer = sync_factory(workers, tensor_parallel_size, device=str(self.learner.device),
                                          timeout_s=self.train.sync_timeout_s)
            self._transfer_epoch = epoch
        version = self.learner.version
        try:
            seconds = self._transfer.sync(self.learner, version)
        except WeightTransferError as e:
            # the group is aborted; the next call builds a new one (a new port). The rank keeps serving:
            # the driver re-syncs the workers that died and retries (RolloutGroup.sync_direct)
            self._transfer = None
            return {"version": version, "error": str(e)}
        return {"version": version, "seconds": seconds, "bytes": float(self._transfer.last_bytes)}

    def save_checkpoint(self, path: str, step: int, extra: dict[str, Any], metrics: dict[str, float]) -> None:
        # every rank: under FSDP each writes its own optimizer shard (checkpoint.py); a rank that skipped
        # it could never resume, and rank 0 waits for all of them before it marks the checkpoint complete
        save_checkpoint(path, self.learner, step, extra=extra)
        # metrics only: the checkpoint is already in the run's storage, where a restarted group finds it
        # (``restore``); handing Ray Train the folder too would store a second copy
        self.session.report({"step": step, **metrics})

    def fingerprint(self) -> str:
        """A hash of the trainable weights: DDP ranks must agree on it."""
        import hashlib

        h = hashlib.sha256()
        for k, v in sorted(self.learner.trainable_state().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


class LocalLearners:
    """The learner group in this process: one rank, no Ray (tests, debugging)."""

    world_size = 1

    def __init__(self, train: Any, device: str = "cpu"):
        self.rank = LearnerRank(train, Session(device))

    def start(self) -> RankState:
        create_folder(self.rank.train.checkpoints)
        return self.rank.restore()

    def sft_step(self, shards: list[list[Any]], lr: float | None) -> dict[str, float]:
        return self.rank.sft_step(shards[0], lr)

    def train_step(self, shards: list[list[Any]], rewards: list[list[float]], pad_to: int,
                   well_formed: list[list[bool]] | None = None) -> dict[str, float]:
        return self.rank.train_step(shards[0], rewards[0], pad_to, well_formed[0] if well_formed else None)

    def reset_reference(self) -> None:
        self.rank.reset_reference()

    def sync_payload(self, kind: str, bucket_mb: float) -> Any:
        return self.rank.sync_payload(kind, bucket_mb)

    def broadcast_weights(self, workers: list[Any], tensor_parallel_size: int, epoch: int) -> dict[str, Any]:
        return self.rank.broadcast_weights(workers, tensor_parallel_size, epoch)

    def save_checkpoint(self, path: str, step: int, extra: dict[str, Any], metrics: dict[str, float]) -> None:
        self.rank.save_checkpoint(path, step, extra, metrics)

    def fingerprints(self) -> list[str]:
        return [self.rank.fingerprint()]

    def close(self) -> None:
        return None


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry of one learner rank: restore, then serve the driver's commands."""
    setup_worker_threads(config["num_cpus"])
    train = RouterR1TrainConfig(**config["train"])
    session = RayTrainSession(use_gpu=config["use_gpu"])
    rank = LearnerRank(train, session)
    state = rank.restore()

    def handle(method: str, *args: Any) -> Any:
        out = getattr(rank, method)(*args)
        if method == "sync_payload":
            # by reference: stored on this node; the mailbox and the driver never hold the tensors
            return PayloadRef.put(out)
        return out

    serve_commands(config["mailbox"], session.rank, state, handle)


class LearnerGroup:
    """``resources.learner.num_workers`` learner ranks on Ray Train, commanded by this (driver) process."""

    def __init__(self, train: Any, resources: ResourceSpec, max_failures: int = 2,
                 storage_path: str | None = None, run_name: str = "router_r1"):
        self.train = train
        self.resources = resources
        self.world_size = resources.learner.num_workers
        # Ray Train's run state beside the checkpoints, in the run's storage: a node-local path on the head
        # would not be reachable from the learner nodes (Ray Train checks that itself)
        self.run = RunSpec(name=run_name, max_failures=max_failures,
                           storage_path=train_storage_path(str(storage_path or join(parent(train.checkpoints), "ray_train"))))
        self._workers: Any = None

    def _start_workers(self) -> Any:
        def trainer(mailbox: Any) -> Any:
            config = {"train": asdict(self.train), "mailbox": mailbox, "use_gpu": self.resources.use_gpu,
                      "num_cpus": self.resources.learner.num_cpus}
            return make_trainer(train_loop_per_worker, config, self.resources, self.run)

        return CommandedWorkers(trainer, self.world_size)

    def start(self) -> RankState:
        """Start the ranks (first call) or wait for a restarted group; where rank 0 stands."""
        if self._workers is None:
            create_folder(self.train.checkpoints)
            self._workers = self._start_workers()
        return self._workers.wait_ready()[0]

    def _all(self, method: str, *per_rank: Sequence[Any]) -> list[Any]:
        return self._workers.call([(method, *[a[r] for a in per_rank]) for r in range(self.world_size)])

    def sft_step(self, shards: list[list[Any]], lr: float | None) -> dict[str, float]:
        return mean_metrics(self._all("sft_step", shards, [lr] * self.world_size))

    def train_step(self, shards: list[list[Any]], rewards: list[list[float]], pad_to: int,
                   well_formed: list[list[bool]] | None = None) -> dict[str, float]:
        return mean_metrics(self._all("train_step", shards, rewards, [pad_to] * self.world_size,
                                      well_formed or [None] * self.world_size))

    def reset_reference(self) -> None:
        self._workers.call([("reset_reference",)] * self.world_size)

    def sync_payload(self, kind: str, bucket_mb: float) -> PayloadRef:
        """Rank 0's payload, left in its node's object store: the rollout workers fetch it from there."""
        return self._workers.call([("sync_payload", kind, bucket_mb)] + [None] * (self.world_size - 1))[0]

    def broadcast_weights(self, workers: list[Any], tensor_parallel_size: int, epoch: int) -> dict[str, Any]:
        """Rank 0 sends its gathered weights to the engines (the other ranks gathered theirs into it at
        the end of ``train_step``, so they take no part)."""
        cmd = ("broadcast_weights", workers, tensor_parallel_size, epoch)
        return self._workers.call([cmd] + [None] * (self.world_size - 1))[0]

    def save_checkpoint(self, path: str, step: int, extra: dict[str, Any], metrics: dict[str, float]) -> None:
        n = self.world_size
        self._all("save_checkpoint", [path] * n, [step] * n, [extra] * n, [metrics] * n)

    def fingerprints(self) -> list[str]:
        return self._workers.call([("fingerprint",)] * self.world_size)

    def close(self) -> Any:
        """Let the ranks finish; the Ray Train ``Result``."""
        if self._workers is None:
            return None
        workers, self._workers = self._workers, None
        return workers.stop()

    def __enter__(self) -> LearnerGroup:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        """Let the ranks finish (``self.result``: the Ray Train ``Result``); after a failure in the driver,
        close them without letting a failure to close hide the original error."""
        if exc_type is None:
            self.result = self.close()
        else:
            self._abort()

    def _abort(self) -> None:
        try:
            self.close()
        except Exception as e:  # noqa: BLE001 - the original error matters more
            log.warning("closing the learner group after a failure: %s", e)
