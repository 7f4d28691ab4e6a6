"""One way to train on Ray: every job's learner ranks run under Ray Train through this module.

- ``RunSpec``: the Ray Train run's knobs besides scaling (failure config, storage, checkpoints kept).
- ``make_trainer`` turns ``ResourceSpec.learner`` + ``RunSpec`` into a ``TorchTrainer``: gloo on CPU,
  NCCL on GPU, ``FailureConfig(max_failures)`` so a dead rank restarts from the last reported checkpoint.
- ``Session`` / ``RayTrainSession``: what a rank's code reports to (rank, world size, device, resume
  checkpoint, report), the same code path with or without Ray Train.
- ``select_device`` picks a rank's torch device from the devices Ray Train assigned it (pure, tested).
- ``all_reduce_*`` / ``rank_shard`` / ``wrap_ddp``: collectives that fall back to one process; tensors live
  on the session's device because NCCL refuses CPU tensors.

Router-R1 drives its ranks from the job's driver (``rlrouter.distributed.commanded``); GMTRouter and
the intent classifier run a plain ``train_loop_per_worker`` (``fit``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from rlrouter.distributed.resources import ResourceSpec, learner_scaling_config

T = TypeVar("T")


@dataclass
class RunSpec:
    """A Ray Train run: where it keeps checkpoints and how often a failed rank group may restart."""

    name: str = "run"
    storage_path: str = "outputs/ray_train"
    """Ray Train's storage (reported checkpoints): an absolute path or a URI, passed on as it is (callers use
    ``rlrouter.storage.train_storage_path``); a shared path or URI on a multi-node cluster."""
    max_failures: int = 2
    """FailureConfig.max_failures: worker-group restarts (from the last checkpoint) before the run fails."""
    checkpoints_to_keep: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"max_failures: an int >= -1 (-1: unlimited), got {self.max_failures!r}")
        if self.checkpoints_to_keep < 1:
            raise ValueError(f"checkpoints_to_keep: must be >= 1, got {self.checkpoints_to_keep}")


def backend_for(spec: ResourceSpec) -> str:
    """NCCL when the learner ranks hold GPUs, gloo otherwise."""
    return "nccl" if spec.use_gpu else "gloo"


def make_trainer(train_loop_per_worker: Callable[[dict[str, Any]], None], config: dict[str, Any],
                 spec: ResourceSpec, run: RunSpec) -> Any:
    """The ``TorchTrainer`` of one job's learner ranks."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    return TorchTrainer(
        train_loop_per_worker, train_loop_config=config,
        torch_config=TorchConfig(backend=backend_for(spec)),
        scaling_config=learner_scaling_config(spec),
        run_config=RunConfig(name=run.name, storage_path=run.storage_path,
                             failure_config=FailureConfig(max_failures=run.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=run.checkpoints_to_keep)))


def fit(train_loop_per_worker: Callable[[dict[str, Any]], None], config: dict[str, Any], spec: ResourceSpec,
        run: RunSpec) -> Any:
    """Run ``train_loop_per_worker`` on ``spec.learner.num_workers`` ranks to completion; the Ray Train
    ``Result`` (raises if the run failed past ``max_failures``)."""
    return make_trainer(train_loop_per_worker, config, spec, run).fit()


def select_device(use_gpu: bool, assigned: Sequence[str]) -> str:
    """A rank's torch device: ``cpu`` without GPUs, else the lowest-index CUDA device Ray assigned it.

    ``assigned`` are the device strings Ray Train gives the rank (``ray.train.torch.get_devices()``).
    """
    if not use_gpu:
        return "cpu"
    cuda = [d for d in assigned if str(d).startswith("cuda")]
    if not cuda:
        raise RuntimeError(f"resources.learner.num_gpus > 0 but this rank was assigned no CUDA device "
                           f"(got {list(assigned)}); check CUDA_VISIBLE_DEVICES and the cluster's GPUs")

    def index(d: str) -> int:
        return int(str(d).split(":")[1]) if ":" in str(d) else 0

    return f"cuda:{min(index(d) for d in cuda)}"


class Session:
    """What a rank reports to, in one process (no Ray Train): rank 0 of 1, on ``device``."""

    rank = 0
    world_size = 1

    def __init__(self, device: str = "cpu"):
        self.device = device

    def checkpoint_to_resume(self) -> str | None:
        return None

    def report(self, metrics: dict[str, float], checkpoint_dir: str | None = None) -> None:
        pass

    def barrier(self) -> None:
        barrier()


class RayTrainSession(Session):
    """A Ray Train rank: its rank, world size, device; the run's checkpoint to resume from; ``report``."""

    def __init__(self, use_gpu: bool = False) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.rank, self.world_size = ctx.get_world_rank(), ctx.get_world_size()
        devices: list[str] = []
        if use_gpu:
            from ray.train.torch import get_devices

            devices = [str(d) for d in get_devices()]
        super().__init__(select_device(use_gpu, devices))
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.set_device(self.device)
        self._train = ray.train

    def checkpoint_to_resume(self) -> str | None:
        ckpt = self._train.get_checkpoint()
        if ckpt is None:
            return None
        return ckpt.to_directory(tempfile.mkdtemp(prefix="rlrouter-resume-"))

    def report(self, metrics: dict[str, float], checkpoint_dir: str | None = None) -> None:
        """Every rank must call this together (Ray Train syncs them); only ranks with files pass a dir."""
        ckpt = self._train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        self._train.report(metrics, checkpoint=ckpt)


def setup_worker_threads(num_cpus: float) -> None:
    """Ray sets OMP_NUM_THREADS from the rank's num_cpus; torch's intra-op pool follows it."""
    import torch

    torch.set_num_threads(max(1, int(num_cpus)))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


# ---- collectives: the identity in one process, torch.distributed under Ray Train --------------------

def is_distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    import torch.distributed as dist

    if is_distributed():
        dist.barrier()


def _reduce(values: Sequence[float], op: str, device: str | None) -> list[float]:
    import torch
    import torch.distributed as dist

    # NCCL reduces only CUDA tensors, gloo CPU ones: the tensor goes where the process group works
    if device is None:
        nccl = is_distributed() and dist.get_backend() == "nccl"
        device = f"cuda:{torch.cuda.current_device()}" if nccl else "cpu"
    dtype = torch.float32 if str(device).startswith("cuda") else torch.float64
    t = torch.tensor(list(values), dtype=dtype, device=device)
    if is_distributed():
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return [float(x) for x in t.cpu().tolist()]


def all_reduce_sum(values: Sequence[float], device: str | None = None) -> list[float]:
    """Sum a few scalars over ranks (metrics, counts); identical result on every rank."""
    return _reduce(values, "sum", device)


def all_reduce_max(values: Sequence[float], device: str | None = None) -> list[float]:
    return _reduce(values, "max", device)


def all_reduce_mean(values: dict[str, float], device: str | None = None) -> dict[str, float]:
    _, world = rank_and_world()
    keys = sorted(values)
    sums = all_reduce_sum([values[k] for k in keys], device)
    return {k: v / world for k, v in zip(keys, sums)}


def rank_shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """Every rank gets the same number of items (the remainder is dropped): DDP needs the same number
    of backward calls on each rank or the all-reduce hangs."""
    n = (len(items) // world) * world
    return list(items[rank:n:world])


def wrap_ddp(model: Any) -> Any:
    """DDP over the parameters that train now; the plain module when there is one process."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    dev = next((p.device for p in model.parameters()), None)
    ids = [dev.index] if dev is not None and dev.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: Any) -> Any:
    return model.module if hasattr(model, "module") else model
