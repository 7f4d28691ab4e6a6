"""The candidate pool: routable LLMs behind one async interface.

``CandidatePool.from_config(cfg.pool)`` builds the pool; ``await pool.route([(model, query), ...])``
answers route calls concurrently. Backends: ``openai`` (any OpenAI-compatible endpoint), ``vllm``
(a local engine in a Ray actor) and ``replay`` (logged outcomes). Ray and vLLM are imported only
when a vLLM candidate is built.
"""

from rlrouter.pool.base import BACKENDS, Backend, Candidate, CandidateResponse
from rlrouter.pool.pool import CandidatePool, PoolConfigError, candidate_from_spec, read_pool_config

__all__ = ["BACKENDS", "Backend", "Candidate", "CandidatePool", "CandidateResponse", "PoolConfigError",
           "candidate_from_spec", "read_pool_config"]
