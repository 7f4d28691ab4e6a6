"""Weight sync learner -> rollout workers, behind one small interface with swappable transports.

- ``lora``: the learner saves its adapter (peft, safetensors); the files' bytes travel through the Ray
  object store (so workers on other nodes need no shared disk), each worker writes them to a NEW
  directory per version (overwriting a cached adapter corrupts it) and serves it with a LoRARequest.
- ``tensors``: HF-named full tensors (the LoRA-merged modules that changed, or every weight for full
  fine-tuning) in buckets of ``bucket_mb``, pushed with the engine's ``reload_weights``. Generation
  then runs at full speed (a LoRA adapter in vLLM halves it on CPU).

A bucket is reloaded on its own, and vLLM fuses q/k/v (and gate/up) into one parameter: a reload that
brings only some members of a fused group materialises the rest from nothing (garbage output). So
buckets are cut between fused groups, never inside one, whatever ``bucket_mb`` is; a group larger
than ``bucket_mb`` travels alone in an oversized bucket.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

# HF projection names that vLLM fuses into one parameter (Llama, Qwen, Mistral families)
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


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


@dataclass(frozen=True)
class PayloadRef:
    """A :class:`SyncPayload` left in the object store of the node that made it (learner rank 0), as the
    driver holds it: the reference and what the driver needs to know. The rollout workers fetch it from
    there themselves; the driver never fetches it (5.75 GiB for the 3B preset, which would go through the
    head's object store and back out every step)."""

    ref: Any
    kind: str
    version: int
    nbytes: int

    @classmethod
    def put(cls, payload: SyncPayload) -> PayloadRef:
        """Run where ``payload`` was made (rank 0): store it there."""
        import ray

        return cls(ray.put(payload), payload.kind, payload.version, payload.nbytes)


def make_payload(kind: str, source: WeightSource, version: int, bucket_mb: float = 64.0) -> SyncPayload:
    if kind == "lora":
        with tempfile.TemporaryDirectory(prefix="rlrouter-adapter-") as d:
            source.save_adapter(d)
            files = {p.name: p.read_bytes() for p in Path(d).iterdir() if p.is_file()}
        return SyncPayload(kind="lora", version=version, files=files)
    if kind == "tensors":
        if not bucket_mb > 0:
            raise ValueError(f"train.sync_bucket_mb: must be > 0, got {bucket_mb!r}")
        return SyncPayload(kind="tensors", version=version,
                           buckets=bucket_tensors(source.merged_weights(only_changed=True), bucket_mb))
    raise ValueError(f"sync.kind: 'lora' or 'tensors', got {kind!r}")


def fused_group_key(name: str) -> str:
    """Tensors with the same key must reach the engine in one reload: the fused group they belong to
    ("model.layers.3.self_attn.q_proj.weight" -> "model.layers.3.self_attn.q_proj+k_proj+v_proj"), or
    the name itself for an unfused tensor."""
    module, _, _kind = name.rpartition(".")
    prefix, _, leaf = module.rpartition(".")
    for group in FUSED_GROUPS:
        if leaf in group:
            return f"{prefix}.{'+'.join(group)}"
    return name


def bucket_tensors(named: list[tuple[str, torch.Tensor]], bucket_mb: float) -> list[list[tuple[str, torch.Tensor]]]:
    """Buckets of at most ``bucket_mb`` that never split a fused group (module docstring)."""
    groups: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, t in named:  # members of a group may come far apart (LoRA: merged q/v first, k at the end)
        groups.setdefault(fused_group_key(name), []).append((name, t))
    limit = bucket_mb * 2**20
    buckets: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    for members in groups.values():
        n = sum(t.numel() * t.element_size() for _, t in members)
        if buckets[-1] and size + n > limit:
            buckets.append([])
            size = 0
        buckets[-1].extend(members)
        size += n
    return buckets


def apply_payload(worker: Any, payload: SyncPayload | PayloadRef, root: str | None = None) -> float:
    """Runs inside a RolloutWorker: make ``payload`` the served policy. Returns seconds taken."""
    t0 = time.perf_counter()
    if isinstance(payload, PayloadRef):  # an in-process rollout (LocalRollout) fed by Ray Train learners
        import ray

        payload = ray.get(payload.ref)
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
