"""Methods added to every vLLM worker (``worker_extension_cls``, set by ``rlrouter.rollout.engine``).

They run inside the worker process, so an engine in its own process (CUDA) gets new weights as a list
of picklable ``(name, tensor)`` pairs through ``collective_rpc`` and builds the iterator that
``reload_weights`` wants on its side. With tensor parallelism each TP worker receives the full tensors
and its weight loaders keep its own slice.
"""

from __future__ import annotations

from typing import Any


class WeightSyncExtension:
    """Mixed into vLLM's worker class: ``self`` is the worker (``model_runner``, ``reload_weights``)."""

    def rlrouter_reload_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        """Load HF-named full tensors in checkpoint format; returns how many arrived."""
        from rlrouter.rollout.worker import quiet_partial_reload_logs

        quiet_partial_reload_logs()  # in the engine's process, where vLLM logs them
        self.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        return len(named_tensors)

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
