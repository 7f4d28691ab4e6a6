"""What vLLM imports in every engine worker process (``worker_extension_cls``, set by ``rlrouter.engine``).

Our worker extension (``rlrouter.sync.vllm_ext``), and the ``gloo`` weight-transfer backend registered
with vLLM's factories (``rlrouter.sync.gloo``): vLLM resolves the extension before the worker loads
the model and builds its transfer engine, so a CPU engine started with ``backend: gloo`` finds it, in
its own process and in each tensor-parallel worker process. Kept apart from ``vllm_ext``, which the
driver imports to pack tensors, so that importing the rollout group does not import vLLM.
"""

from __future__ import annotations

from rlrouter.sync import gloo
from rlrouter.sync.vllm_ext import WeightSyncExtension

gloo.register()

__all__ = ["WeightSyncExtension"]
