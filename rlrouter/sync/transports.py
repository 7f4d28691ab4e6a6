"""Weight sync learner -> rollout workers, behind one small interface with swappable transports.

- ``lora``: the learner saves its adapter (peft, safetensors); the files' bytes travel through the Ray
  object store (so workers on other nodes need no shared disk), each worker writes them to a NEW
  directory per version (overwriting a cached adapter corrupts it) and serves it with a LoRARequest.
- ``tensors``: HF-named full tensors (the LoRA-merged modules that changed, or every weight for full
  fine-tuning) in buckets of ``bucket_mb``, pushed with the engine's ``reload_weights``. Generation
  then runs at full speed (a LoRA adapter in vLLM halves it on CPU).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch


class WeightSource(Protocol):
    def save_adapter(self, path: str) -> str: ...

    def merged_weights(self, only_changed: bool = True) -> list[tuple[str, torch.Tensor]]: ...


@dataclass
class SyncPayload:
    """What a rollout worker needs to serve policy version ``version``: adapter files or tensor buckets."""

    kind: str
    version: int
    files: dict[str, bytes] | None = None
    buckets: list[list[tuple[str, torch.Tensor]]] | None = None

    @property
    def nbytes(self) -> int:
        if self.files is not None:
            return sum(len(b) for b in self.files.values())
        return sum(t.numel() * t.element_size() for b in self.buckets or [] for _, t in b)


def make_payload(kind: str, source: WeightSource, version: int, bucket_mb: float = 64.0) -> SyncPayload:
    if kind == "lora":
        with tempfile.TemporaryDirectory(prefix="rlrouter-adapter-") as d:
            source.save_adapter(d)
            files = {p.name: p.read_bytes() for p in Path(d).iterdir() if p.is_file()}
        return SyncPayload(kind="lora", version=version, files=files)
    if kind == "tensors":
        limit = bucket_mb * 2**20
        buckets: list[list[tuple[str, torch.Tensor]]] = [[]]
        size = 0
        for name, t in source.merged_weights(only_changed=True):
            n = t.numel() * t.element_size()
            if buckets[-1] and size + n > limit:
                buckets.append([])
                size = 0
            buckets[-1].append((name, t))
            size += n
        return SyncPayload(kind="tensors", version=version, buckets=buckets)
    raise ValueError(f"sync.kind: 'lora' or 'tensors', got {kind!r}")


def apply_payload(worker: Any, payload: SyncPayload, root: str | None = None) -> float:
    """Runs inside a RolloutWorker: make ``payload`` the served policy. Returns seconds taken."""
    t0 = time.perf_counter()
    if payload.kind == "lora":
        base = Path(root or os.environ.get("RLROUTER_ADAPTER_DIR", tempfile.gettempdir())) / \
            f"rlrouter-adapters-{os.getpid()}" / f"v{payload.version:06d}"
        base.mkdir(parents=True, exist_ok=True)
        for name, data in (payload.files or {}).items():
            (base / name).write_bytes(data)
        worker.load_lora(str(base), payload.version)
    else:
        buckets = payload.buckets or []
        for i, bucket in enumerate(buckets):
            worker.update_weights(bucket, payload.version, last=i == len(buckets) - 1)
    return time.perf_counter() - t0
