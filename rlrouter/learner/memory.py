"""A learner rank's GPU memory, worst case, by the arithmetic of docs/gpu.md ("Learner rank").

FSDP2 shards the fp32 master weights, their gradients, AdamW's two moments and the frozen bf16 KL
reference over the ranks. Unsharded at once: the root module (embeddings) in bf16, two gathered layers
and the embeddings' fp32 gradient before its reduce-scatter. With gradient checkpointing each layer's
input is kept and one layer is recomputed at a time. The logits dominate: for the W policy-span
positions of a micro-batch of B rows the bf16 logits, their fp32 copy and the fp32 softmax of the
backward (or the entropy metric) were alive together: about 14 bytes an element forward and 20 backward,
measured, where this arithmetic once assumed 10. The learner now computes the log-probs and entropies in
chunks of ``LOGITS_CHUNK`` positions (``rlrouter.algos.common.chunked_logprobs_and_entropy``): over the whole
window only the bf16 logits and their bf16 gradient are alive (``LOGITS_BYTES``), plus one chunk's fp32
temporaries (``CHUNK_BYTES``). :func:`measure_logits_bytes` measures both paths on the real code;
``tests/learner/test_memory.py`` holds the constants to it and checks every GPU preset in the worst case
(W = the longest policy span).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlrouter.algos.common import LOGITS_CHUNK

GIB = 2**30


@dataclass(frozen=True)
class ModelDims:
    """What the arithmetic needs of a decoder-only model (from its ``config.json``)."""

    params: float
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    layer_params: float
    embedding_params: float


QWEN25_3B = ModelDims(params=3.086e9, hidden=2048, intermediate=11008, layers=36, vocab=151_936,
                      layer_params=77.08e6, embedding_params=311.2e6)
"""Qwen2.5-3B-Instruct: hidden 2048, MLP 11008, 36 layers, 16 query / 2 KV heads of 128, tied embeddings."""

LOGITS_BYTES = 4
"""Bytes per element of the logits window, whole: the bf16 logits (2) and their bf16 gradient (2)."""
CHUNK_BYTES = 28
"""Bytes per element of one chunk of positions (``LOGITS_CHUNK`` of them): its fp32 temporaries (measured:
17-23 on CPU with the entropy's gradient; 28 leaves room for small shapes and the allocator)."""
CUDA_CONTEXT_GIB = 3.0
"""CUDA context and allocator slack."""
ATTENTION_GIB_PER_ROW = 0.05
"""One recomputed layer's attention working set per row at 4096 tokens (SDPA, bf16)."""


def learner_memory_gib(m: ModelDims, ranks: int, micro_batch: int, seq_len: int, logits_window: int,
                       gradient_checkpointing: bool = True) -> dict[str, float]:
    """Per-rank GiB by item, and ``total``, of a full fine-tune with a frozen bf16 reference (bf16
    compute, fp32 master weights and AdamW state)."""
    b, t = micro_batch, seq_len
    if not gradient_checkpointing:
        raise ValueError("learner_memory_gib: only the checkpointed layout is modelled (every layer's "
                         "activations would be kept otherwise)")
    out = {
        "weights_fp32": m.params * 4 / ranks / GIB,
        "gradients_fp32": m.params * 4 / ranks / GIB,
        "adamw_fp32": m.params * 8 / ranks / GIB,
        "reference_bf16": m.params * 2 / ranks / GIB,
        "unsharded": (m.embedding_params * 2 + 2 * m.layer_params * 2 + m.embedding_params * 4) / GIB,
        "activations_kept": m.layers * b * t * m.hidden * 2 / GIB,
        "layer_recomputed": (3 * b * t * m.intermediate * 2) / GIB + ATTENTION_GIB_PER_ROW * b,
        "logits": b * m.vocab * (logits_window * LOGITS_BYTES + min(logits_window, LOGITS_CHUNK) * CHUNK_BYTES) / GIB,
        "cuda_context": CUDA_CONTEXT_GIB,
    }
    out["total"] = sum(out.values())
    return out


def measure_logits_bytes(path: str, rows: int, window: int, vocab: int, temperature: float = 0.7,
                         entropy_grad: bool = False, seed: int = 0) -> dict[str, float]:
    """What the learner's log-prob and entropy computation adds to memory, in bytes per logits element
    (rows x window x vocab), forward and forward + backward, beyond the bf16 logits themselves: the
    process's peak resident memory from the start of the measurement (Linux: ``/proc/self/clear_refs``
    resets ``VmHWM``). One measurement per fresh process, with
    ``MALLOC_MMAP_THRESHOLD_=65536`` so freed tensors leave the resident set (``tests/learner/test_memory.py``,
    ``benchmarks/bench_logits_memory.py``). ``path``: ``chunked`` (the learner's) or ``plain`` (autograd
    through ``token_logprobs_and_entropy``, as before)."""
    import torch

    from rlrouter.algos.common import chunked_logprobs_and_entropy, token_logprobs_and_entropy

    fn = {"chunked": chunked_logprobs_and_entropy, "plain": token_logprobs_and_entropy}[path]
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    logits = torch.randn(rows, window + 1, vocab, dtype=torch.bfloat16).requires_grad_()
    ids = torch.randint(0, vocab, (rows, window + 1))
    weights = torch.randn(rows, window + 1)
    elements = rows * window * vocab

    def status(field: str) -> float:
        with open("/proc/self/status") as f:
            return float(next(ln.split()[1] for ln in f if ln.startswith(field + ":"))) * 1024.0  # kB

    def peak() -> float:
        return status("VmHWM")

    with open("/proc/self/clear_refs", "w") as f:  # the peak from here on (imports may have peaked higher)
        f.write("5")
    base = status("VmRSS")
    logp, entropy = fn(logits, ids, temperature, entropy_grad=entropy_grad)
    forward = peak()
    loss = (logp * weights).sum() + ((entropy * weights).sum() if entropy_grad else 0.0)
    loss.backward()
    backward = peak()
    return {"path": path, "rows": rows, "window": window, "vocab": vocab, "entropy_grad": entropy_grad,
            "forward_bytes_per_element": (forward - base) / elements,
            "backward_bytes_per_element": (backward - base) / elements}
