"""GPU-to-GPU weight sync with vLLM's own NCCL weight transfer (``vllm.distributed.weight_transfer``).

vLLM 0.32 documents this for RLHF: the engine is started with ``weight_transfer_config={"backend":
"nccl"}`` (``rollout.engine.weight_transfer: nccl``), the trainer's rank 0 and every engine worker
join one NCCL group, and each sync is ``start_weight_update`` / ``update_weights`` (the workers
receive while rank 0 broadcasts, in packed buffers) / ``finish_weight_update``. This module holds
the two pieces that are ours: the learner's merged weights as a vLLM ``WeightSource``, and a client
that drives our ``RolloutWorker`` actors (each engine is a vLLM instance of its own, so each gets its
own ``rank_offset`` in the group: 1 + engine index x tensor parallel size).

Wired in (``train.sync: nccl``, which also starts the engines with ``weight_transfer: nccl``): each
step the driver asks the learner's rank 0 to ``broadcast_weights`` to the rollout workers' handles
(``LearnerRank.broadcast_weights`` builds an ``NcclWeightSync`` and calls ``sync``), then the rollout
group records the new version on every worker (``RolloutGroup.sync_direct``); a worker that restarts
gets that version through the object store and the next sync builds a new NCCL group. The
orchestration is tested on CPU with stand-ins (tests/sync/test_nccl_wiring.py); the NCCL transfer
itself has NOT RUN ON A GPU: no session that wrote it had one (docs/gpu.md).
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterator, Sequence

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

TRANSFER_METHODS = ("init_weight_transfer_engine", "start_weight_update", "update_weights", "finish_weight_update")


class MergedWeightsSource(WeightSource):
    """The learner's HF-named merged weights (rank 0's gathered copy) moved to ``device`` as they are sent."""

    def __init__(self, named: Sequence[tuple[str, torch.Tensor]], device: str | torch.device):
        self._named = list(named)
        self._device = torch.device(device)

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self._named]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for n, t in self._named:
            yield n, t.to(self._device, non_blocking=True).contiguous()


class RolloutWorkersClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over ``RolloutWorker`` actors (their ``weight_transfer``)."""

    def __init__(self, workers: Sequence[Any], tensor_parallel_size: int = 1):
        self.workers = list(workers)
        self.tp = tensor_parallel_size
        self.version: int | None = None

    def _all(self, method: str, payloads: Sequence[dict | None]) -> None:
        import ray

        ray.get([w.weight_transfer.remote(method, p, self.version) for w, p in zip(self.workers, payloads)])

    def init_payloads(self, init_info: dict) -> list[dict]:
        """Engine i's workers take NCCL ranks rank_offset + i * tp + (0 .. tp - 1)."""
        base = int(init_info.get("rank_offset", 1))
        return [{**init_info, "rank_offset": base + i * self.tp} for i in range(len(self.workers))]

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._all("init_weight_transfer_engine", self.init_payloads(init_info))

    def start_weight_update(self) -> None:
        self._all("start_weight_update", [None] * len(self.workers))

    def update_weights(self, update_info: dict) -> None:
        self._all("update_weights", [update_info] * len(self.workers))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._all("finish_weight_update", [None] * len(self.workers))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class NcclWeightSync:
    """Learner rank 0 -> every engine over NCCL. Build once (the group is set up at the first sync)."""

    def __init__(self, workers: Sequence[Any], tensor_parallel_size: int = 1, device: str = "cuda",
                 master_address: str | None = None, master_port: int | None = None):
        import ray

        self.client = RolloutWorkersClient(workers, tensor_parallel_size)
        self.world_size = 1 + len(self.client.workers) * tensor_parallel_size
        self.device = device
        self.master_address = master_address or ray.util.get_node_ip_address()
        self.master_port = master_port or _free_port()
        self._engine: Any = None
        self.last_bytes = 0
        """Bytes the last ``sync`` sent (to each engine)."""

    def sync(self, source: Any, version: int) -> float:
        """Send ``source.merged_weights()`` (a Learner on rank 0) to every engine; returns seconds taken."""
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        t0 = time.perf_counter()
        named = source.merged_weights(only_changed=True)
        self.last_bytes = sum(t.numel() * t.element_size() for _, t in named)
        weights = MergedWeightsSource(named, self.device)
        self.client.version = version
        if self._engine is None:
            info = NCCLTrainerInitInfo(master_address=self.master_address, master_port=self.master_port,
                                       world_size=self.world_size, rank=0)
            self._engine = NCCLTrainerWeightTransferEngine.trainer_init(info, client=self.client, source=weights)
        else:
            self._engine.source = weights
        self._engine.send_weights()
        return time.perf_counter() - t0

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
