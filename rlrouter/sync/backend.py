"""Which process-group backend carries the weights from the learner to the engines (no torch import:
the engine wrapper and the driver read it without loading torch)."""

from __future__ import annotations


def transfer_backend(device: str) -> str:
    """The weight-transfer group's backend for a process on ``device`` ("cuda", "cuda:0", "cpu"): NCCL
    between GPUs; gloo on CPU, where it stands in for NCCL under the same vLLM engine classes
    (``rlrouter.sync.gloo``). Sender and engines pick it alike, so they always agree on one device kind."""
    return "nccl" if str(device).split(":")[0] == "cuda" else "gloo"
