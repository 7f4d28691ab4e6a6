"""Methods added to every vLLM worker (``worker_extension_cls``, set by ``rlrouter.engine``).

They run inside the worker process. An engine in its own process (always on CUDA; on CPU with
``in_process: false``) gets ``collective_rpc`` arguments through vLLM's msgpack encoder, which turns a
tensor into ``(dtype, shape, index of an out-of-band frame)`` and, for untyped utility arguments, never
turns it back: the worker received ``["float32", [576, 576], 1]`` lists instead of tensors (vLLM 0.32
``v1/serial_utils.py``: ``_decode_tensor`` runs only where a type hint asks for a tensor; the frames are
gone by then), and ``reload_weights`` failed with ``'list' object has no attribute 'shard_id'``. So
tensors cross as ``[name, dtype, shape, raw bytes]`` (``pack_named_tensors``), which msgpack carries as
they are, and the worker rebuilds them (``unpack_named_tensors``) and builds the iterator that
``reload_weights`` wants on its side. With tensor parallelism each TP worker receives the full tensors
and its weight loaders keep its own slice.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Sequence

import torch

# A sync sends only the fused groups LoRA changed (q/k/v of each layer), so every reload is partial by design:
# vLLM then logs one "<Layer>: Failed to load weights" per untouched layer (it puts that layer's own weights
# back, model_loader/reload/layerwise.py) and lists the names not sent (inplace.py): ~460 lines per sync,
# none of them an error (../shared/notes/weight-sync-check.md). What a sync delivers is checked on every
# step instead, by ``rollout/logprob_gap`` (the learner's log-probs against the engine's).
PARTIAL_RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise",
                          "vllm.model_executor.model_loader.reload.inplace")


def quiet_partial_reload_logs() -> None:
    for name in PARTIAL_RELOAD_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


PackedTensor = list  # [name: str, dtype: str ("float32"), shape: list[int], data: bytes]


def pack_named_tensors(named: Sequence[tuple[str, torch.Tensor]]) -> list[PackedTensor]:
    """``(name, tensor)`` pairs as msgpack-native lists (one copy of the bytes, on the CPU)."""
    out = []
    for name, t in named:
        t = t.detach().to("cpu").contiguous()
        out.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()])
    return out


def unpack_named_tensors(packed: Sequence[PackedTensor]) -> list[tuple[str, torch.Tensor]]:
    """The inverse of ``pack_named_tensors``; the tensors view the received bytes (reload copies them)."""
    out = []
    for item in packed:
        if len(item) != 4 or not isinstance(item[3], (bytes, bytearray, memoryview)):
            raise TypeError(f"rlrouter_reload_weights: expected [name, dtype, shape, bytes] items "
                            f"(pack_named_tensors), got {type(item).__name__} of length {len(item)}")
        name, dtype, shape, data = item
        dt = getattr(torch, dtype, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"rlrouter_reload_weights: {name}: unknown dtype {dtype!r}")
        if len(data) == 0:
            out.append((name, torch.empty(shape, dtype=dt)))
            continue
        with warnings.catch_warnings():  # received bytes are read-only; the weight loaders only read them
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(data, dtype=torch.uint8)
        out.append((name, flat.view(dt).reshape(shape)))
    return out


class WeightSyncExtension:
    """Mixed into vLLM's worker class: ``self`` is the worker (``model_runner``, ``reload_weights``)."""

    def rlrouter_reload_weights(self, packed: list[PackedTensor]) -> int:
        """Load HF-named full tensors (``pack_named_tensors``) in checkpoint format; returns how many arrived."""
        quiet_partial_reload_logs()  # in the engine's process, where vLLM logs them
        named = unpack_named_tensors(packed)
        self.reload_weights(weights_iterator=iter(named), is_checkpoint_format=True)
        return len(named)

    def rlrouter_after_reload(self) -> None:
        """Re-dispatch a tied lm_head after a weight push: on CPU it keeps its old oneDNN handle otherwise."""
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        if head is not None and hasattr(head, "weight"):
            dispatch_cpu_unquantized_gemm(head, remove_weight=False)
