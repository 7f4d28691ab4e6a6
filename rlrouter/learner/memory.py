"""A learner rank's GPU memory, worst case, by the arithmetic of docs/gpu.md ("Learner rank").

FSDP2 shards the fp32 master weights, their gradients, AdamW's two moments and the frozen bf16 KL
reference over the ranks. Unsharded at once: the root module (embeddings) in bf16, two gathered layers
and the embeddings' fp32 gradient before its reduce-scatter. With gradient checkpointing each layer's
input is kept and one layer is recomputed at a time. The logits dominate: for the W policy-span
positions of a micro-batch of B rows the bf16 logits, their fp32 copy and the fp32 softmax of the
backward (or the entropy metric) are alive together. A preset must fit its GPU in the worst case
(W = the longest policy span); ``tests/learner/test_memory.py`` checks every GPU preset.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        "logits": b * logits_window * m.vocab * (2 + 4 + 4) / GIB,
        "cuda_context": CUDA_CONTEXT_GIB,
    }
    out["total"] = sum(out.values())
    return out
