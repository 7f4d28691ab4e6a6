"""torch.distributed helpers that fall back to one process, so training code runs the same with or
without Ray Train (which sets up a gloo process group per worker)."""

from __future__ import annotations

from typing import Sequence, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world() -> tuple[int, int]:
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Sum a few scalars over ranks (metrics, counts); identical result on every rank."""
    t = torch.tensor(list(values), dtype=torch.float64)
    if is_distributed():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """Every rank gets the same number of items (the remainder is dropped): DDP needs the same number
    of backward calls on each rank or the all-reduce hangs."""
    n = (len(items) // world) * world
    return list(items[rank:n:world])


def wrap_ddp(model: nn.Module) -> nn.Module:
    """DDP over the parameters that train now; the plain module when there is one process."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model
