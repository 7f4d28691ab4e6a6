"""vLLM candidate: a local model served by a vLLM engine living in its own Ray actor.

The engine is a Ray actor (``VLLMCandidateActor``) so it gets its own process and cores, the way
OpenRLHF places vLLM engines, and so a crashed engine cannot take the rollout controller with it.
The actor applies the model's chat template (``LLM.chat``), generates with ``SamplingParams`` and
returns text and exact token counts from the engine's token ids. ``stream`` is a Ray streaming generator:
each engine step's new text reaches the Serve proxy as it is decoded.

Options (``Candidate.options``):

- ``model``: a name for ``rlrouter.models.resolve_model`` (default ``smollm2-135m-instruct``);
- ``max_tokens`` (256), ``temperature`` (0.0: a candidate answers deterministically), ``top_p`` (1.0),
  ``seed`` (0), ``system_prompt``;
- engine: the fields of ``rlrouter.engine.EngineConfig``, spelled the same as for rollout
  workers: ``device`` (``auto``: CUDA when the actor sees a GPU), ``max_model_len`` (2048), ``dtype``
  (``auto``: float32 on CPU, bfloat16 on CUDA), ``enforce_eager`` (default true on CPU: compiling a
  30-layer model takes minutes on 2 cores), ``tensor_parallel_size`` (1), ``gpu_memory_utilization``,
  ``kv_cache_space_gib`` (1: ``VLLM_CPU_KVCACHE_SPACE``), ``in_process`` (default true on CPU:
  starts in 4-5 s instead of 25-28 s, see ../shared/notes/vllm-cpu.md), ``engine_kwargs`` (passed
  to ``vllm.LLM`` as they are); the seed is the sampling ``seed``;
- actor: ``num_cpus`` (1), ``num_gpus`` (0), ``actor_name`` (share one engine between processes, e.g.
  the Serve app and a benchmark).

The engine starts at the first ``generate`` (or ``await backend.start()``), not when the pool is
built, so a pool config can list a vLLM candidate that a job never calls.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import ray

from rlrouter.config import to_plain
from rlrouter.engine import EngineConfig, build_engine
from rlrouter.pool.base import Backend, Candidate, CandidateResponse, RequestTooLong
from rlrouter.pool.options import OptionReader, non_negative, positive


class VLLMCandidateEngine:
    """The engine logic (plain class; ``VLLMCandidateActor`` is its Ray actor)."""

    def __init__(self, model: str, engine: dict[str, Any], env: dict[str, str] | None = None):
        for k, v in (env or {}).items():
            os.environ.setdefault(k, v)  # before build_engine imports vLLM
        cfg = EngineConfig(**engine)
        t0 = time.perf_counter()
        self.llm, self.model_path = build_engine(model, cfg)
        self.start_s = time.perf_counter() - t0
        # what the engine was built with, resolved (dtype "auto" -> float32 on CPU, ...)
        self.engine = {k: v for k, v in cfg.llm_kwargs(self.model_path).items() if k != "model"}
        self._stream_ids = itertools.count()

    def info(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "start_s": self.start_s, "engine": self.engine, "pid": os.getpid()}

    def _prompt_ids(self, conversation: list[dict[str, Any]]) -> list[int]:
        """The chat-templated prompt's token ids (the template renders the whole prompt: no tokenizer special
        tokens on top, as ``LLM.chat``)."""
        tok = self.llm.get_tokenizer()
        return tok.encode(tok.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False),
                          add_special_tokens=False)

    def fit(self, conversation: list[dict[str, Any]], sampling: dict[str, Any],
            caller_max_tokens: bool) -> tuple[list[int], dict[str, Any]]:
        """A served request checked against the context, as vLLM's OpenAI server does: a prompt that leaves no
        room, or a caller's ``max_tokens`` beyond the room left, raises :class:`RequestTooLong`; the
        candidate's default ``max_tokens`` (not the caller's) is cut to the room left."""
        ids = self._prompt_ids(conversation)
        context = int(self.engine["max_model_len"])
        room = context - len(ids)
        asked = int(sampling.get("max_tokens") or room)
        if room < 1 or (caller_max_tokens and asked > room):
            raise RequestTooLong(context, len(ids), asked)
        return ids, {**sampling, "max_tokens": min(asked, room)}

    def generate(self, conversations: list[list[dict[str, Any]]], sampling: dict[str, Any],
                 caller_max_tokens: bool | None = None) -> list[dict[str, Any]]:
        """Chat-templated generation; one dict {text, prompt_tokens, completion_tokens, finish_reason} each.
        ``caller_max_tokens`` None: rollouts (vLLM's own checks); True/False: a served request, checked by
        :meth:`fit` (True: the caller set ``max_tokens``)."""
        from vllm import SamplingParams

        if caller_max_tokens is not None:  # a served request: one conversation
            _, sampling = self.fit(conversations[0], sampling, caller_max_tokens)
        outs = self.llm.chat(conversations, SamplingParams(**sampling), use_tqdm=False,
                             add_generation_prompt=True)
        res = []
        for o in outs:
            c = o.outputs[0]
            res.append({"text": c.text, "prompt_tokens": len(o.prompt_token_ids or []),
                        "completion_tokens": len(c.token_ids), "finish_reason": c.finish_reason})
        return res


    def stream(self, conversation: list[dict[str, Any]], sampling: dict[str, Any],
               caller_max_tokens: bool = False) -> Iterator[dict[str, Any]]:
        """One chat-templated generation, yielded as the engine decodes it: dicts {text (the new text only),
        prompt_tokens, completion_tokens (so far), finish_reason (None until the last)}.

        ``LLM.chat`` hands back finished requests only (it sets each request's output kind to FINAL_ONLY),
        so this adds the request to the engine itself with output kind DELTA and drives the engine's steps.
        The actor runs one method at a time, so no other request is in the engine meanwhile. A request that
        does not fit the context (:meth:`fit`) raises before the first yield."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        ids, sampling = self.fit(conversation, sampling, caller_max_tokens)
        engine = self.llm.llm_engine
        rid = f"stream-{next(self._stream_ids)}"
        engine.add_request(rid, {"prompt_token_ids": ids},
                           SamplingParams(**sampling, output_kind=RequestOutputKind.DELTA))
        finished, n = False, 0
        try:
            while not finished and engine.has_unfinished_requests():
                for o in engine.step():
                    c = o.outputs[0]
                    n += len(c.token_ids)
                    finished = o.finished
                    yield {"text": c.text, "prompt_tokens": len(ids), "completion_tokens": n,
                           "finish_reason": c.finish_reason if finished else None}
        finally:
            if not finished:  # the caller went away: free the engine for the next request
                engine.abort_request([rid])


VLLMCandidateActor = ray.remote(VLLMCandidateEngine)


def _engine_error(name: str, e: BaseException) -> str:
    """``e`` raised by the engine actor as one line naming the candidate."""
    cause = getattr(e, "cause", None) or e  # a RayTaskError carries the actor's own exception
    said = str(cause).strip().splitlines()
    return f"vllm '{name}': {type(cause).__name__}: {said[0] if said else ''}"


class VLLMBackend(Backend):
    """A candidate answered by ``VLLMCandidateActor`` (``options`` documented in the module docstring)."""

    batches = True  # the engine batches a whole route batch itself (continuous batching)

    def __init__(self, candidate: Candidate):
        super().__init__(candidate)
        o = OptionReader(to_plain(candidate.options))
        self.model = o.get("model", str, "smollm2-135m-instruct")
        self.sampling = {
            "max_tokens": o.get("max_tokens", int, 256, positive, expect="an int > 0"),
            "temperature": o.get("temperature", float, 0.0, non_negative, expect="a number >= 0"),
            "top_p": o.get("top_p", float, 1.0, lambda v: 0 < v <= 1, expect="a number in (0, 1]"),
            "seed": o.get("seed", int, 0),
        }
        self.system_prompt = o.get("system_prompt", str, None)
        self.engine = {
            "device": o.get("device", str, "auto", lambda v: v in ("auto", "cpu", "cuda"),
                            expect="'auto', 'cpu' or 'cuda'"),
            "max_model_len": o.get("max_model_len", int, 2048, positive, expect="an int > 0"),
            "dtype": o.get("dtype", str, "auto"),
            "enforce_eager": o.get("enforce_eager", bool, None),
            "tensor_parallel_size": o.get("tensor_parallel_size", int, 1, positive, expect="an int > 0"),
            "gpu_memory_utilization": o.get("gpu_memory_utilization", float, 0.5, lambda v: 0 < v <= 1,
                                            expect="a number in (0, 1]"),
            "kv_cache_space_gib": o.get("kv_cache_space_gib", int, 1, positive, expect="an int > 0"),
            "in_process": o.get("in_process", bool, None),
            "enable_lora": False,
            "seed": self.sampling["seed"],
            "engine_kwargs": o.get("engine_kwargs", dict, {}),
        }
        self.num_cpus = o.get("num_cpus", float, 1.0, non_negative, expect="a number >= 0")
        self.num_gpus = o.get("num_gpus", float, 0.0, non_negative, expect="a number >= 0")
        self.actor_name = o.get("actor_name", str, None)
        o.finish()
        # vLLM's own variables are set in the actor by build_engine (where the device is known)
        self.env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false"}
        self._actor: Any = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def _start_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def start(self) -> dict[str, Any]:
        """Start the engine actor (or attach to ``actor_name``) and wait until it is loaded."""
        async with self._start_lock():
            if self._actor is None:
                opts: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                                        "runtime_env": {"env_vars": self.env}}
                if self.actor_name:
                    opts.update(name=self.actor_name, get_if_exists=True)
                actor = VLLMCandidateActor.options(**opts).remote(self.model, self.engine, self.env)
                try:
                    info = await actor.info.remote()
                except Exception:
                    ray.kill(actor)  # a half-started engine holds cores and memory
                    raise
                self._actor = actor
                return info
        return await self._actor.info.remote()

    def conversation(self, prompt: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": prompt}]

    def _sampling(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**self.sampling, **{k: v for k, v in kwargs.items() if k in ("max_tokens", "temperature",
                                                                               "top_p", "seed", "stop")}}

    async def _call(self, conversations: list[list[dict[str, Any]]], kwargs: dict[str, Any],
                    served: bool = False) -> list[CandidateResponse]:
        """``served``: one conversation of a caller, checked against the context (``fit``)."""
        t0 = time.perf_counter()
        try:
            if self._actor is None:
                await self.start()
            outs = await self._actor.generate.remote(conversations, self._sampling(kwargs),
                                                     ("max_tokens" in kwargs) if served else None)
        except Exception as e:  # noqa: BLE001 - engine death or a bad request: per-prompt errors, no raise
            msg = _engine_error(self.candidate.name, e)
            return [CandidateResponse(text="", latency_s=time.perf_counter() - t0, error=msg) for _ in conversations]
        dt = time.perf_counter() - t0
        return [CandidateResponse(text=o["text"], prompt_tokens=o["prompt_tokens"],
                                  completion_tokens=o["completion_tokens"],
                                  cost=self.candidate.cost(o["prompt_tokens"], o["completion_tokens"]),
                                  latency_s=dt) for o in outs]

    async def generate(self, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        return await self._call([self.conversation(p) for p in prompts], kwargs)

    def _with_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        msgs = list(messages)
        if self.system_prompt and not any(m.get("role") == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.system_prompt}] + msgs
        return msgs

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> tuple[CandidateResponse, dict[str, Any]]:
        """A full conversation through the chat template (the Serve proxy keeps multi-turn context)."""
        from rlrouter.pool.chat import completion_dict

        r = (await self._call([self._with_system(messages)], params, served=True))[0]
        return r, (completion_dict(self.candidate.name, r) if r.ok else {})

    async def stream(self, messages: list[dict[str, Any]], **params: Any) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` dicts as the engine decodes (a Ray streaming generator from the actor):
        the role, one chunk of new text per engine step, then ``finish_reason`` with usage.

        Nothing is yielded before the engine's first output, so a call that fails from the start (a
        prompt over the context, a dead engine) raises ``RuntimeError`` with the engine's message and the
        proxy can still answer with a status."""
        name = self.candidate.name
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

        try:
            if self._actor is None:
                await self.start()
            pieces = self._actor.stream.options(num_returns="streaming").remote(
                self._with_system(messages), self._sampling(params), "max_tokens" in params)
        except Exception as e:  # noqa: BLE001 - the engine did not start
            raise RuntimeError(_engine_error(name, e)) from None
        started = False
        try:
            async for ref in pieces:
                try:
                    p = await ref
                except Exception as e:  # noqa: BLE001 - the engine's error, said in one line
                    raise RuntimeError(_engine_error(name, e)) from None
                if not started:
                    started = True
                    yield chunk({"role": "assistant", "content": ""})
                if p["text"]:
                    yield chunk({"content": p["text"]})
                if p["finish_reason"] is not None:
                    usage = {"prompt_tokens": p["prompt_tokens"], "completion_tokens": p["completion_tokens"],
                             "total_tokens": p["prompt_tokens"] + p["completion_tokens"]}
                    yield chunk({}, p["finish_reason"], usage=usage,
                                x_cost_usd=self.candidate.cost(p["prompt_tokens"], p["completion_tokens"]))
        finally:
            ray.cancel(pieces)  # a client that went away stops the generation (no-op once it has finished)

    async def close(self) -> None:
        if self._actor is not None and not self.actor_name:
            ray.kill(self._actor)
        self._actor = None
