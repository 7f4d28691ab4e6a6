"""CandidatePool: the routable candidates of a run, each behind its backend, called concurrently.

A rollout batch emits many ``(model, query)`` route calls at once. ``route``
groups them by candidate, sends them concurrently under one global bound (``max_concurrency``), and
returns one ``CandidateResponse`` per call in the same order. Nothing raises: an unknown model, a
malformed call, a backend exception or a timeout each becomes a response with ``error`` set.

Batching backends (replay, vLLM) get one ``generate`` per candidate per call to ``route``, since
their engine batches better than we can; per-request backends (openai) get one task per query. The
global bound counts tasks in flight.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from rlrouter.config import to_plain
from rlrouter.paths import project_root
from rlrouter.pool.base import BACKENDS, Backend, Candidate, CandidateResponse
from rlrouter.pool.chat import chunk_dicts, completion_dict, last_user_text
from rlrouter.pool.options import OptionError

# Imported on demand: a replay-only pool must not pay for importing Ray and vLLM.
BACKEND_CLASSES = {
    "openai": "rlrouter.pool.openai_compat:OpenAIBackend",
    "replay": "rlrouter.pool.replay:ReplayBackend",
    "vllm": "rlrouter.pool.vllm_backend:VLLMBackend",
}

CANDIDATE_FIELDS = ("name", "price_in", "price_out", "params_b", "backend", "description", "options")
POOL_FIELDS = ("candidates", "max_concurrency", "call_timeout_s", "name", "description")


class PoolConfigError(ValueError):
    """A pool config is wrong; ``field`` is its full path, e.g. ``pool.candidates[1].price_in``."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def backend_class(kind: str) -> type[Backend]:
    mod, _, cls = BACKEND_CLASSES[kind].partition(":")
    return getattr(importlib.import_module(mod), cls)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_pool_config(src: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]], root: Path | None = None,
                     where: str = "pool") -> dict[str, Any]:
    """A pool config as a plain dict, from a YAML file (a path; a relative one is taken under ``root`` when given),
    a config mapping, or a bare candidate list (``{"candidates": [...]}``).

    The one place a pool file is read (the Serve app, its Router-R1 deployment and the ``router_r1`` eval router).
    It checks the shape every reader relies on, a mapping with a non-empty ``candidates`` list of mappings, and
    raises ``PoolConfigError`` naming the file and the field; ``CandidatePool.from_config`` checks the rest.
    """
    if isinstance(src, (str, Path)):
        path = Path(src).expanduser()
        if not path.is_absolute() and root is not None:
            path = root / path
        if not path.is_file():
            raise PoolConfigError(where, f"no pool file at {path}")
        import yaml

        try:
            cfg = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise PoolConfigError(where, f"{path} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
        where = f"{where} ({path})"
        if "${paths." in path.read_text():
            cfg = _resolve_paths(cfg, root, where)
    elif isinstance(src, Mapping):
        cfg = to_plain(src)
    elif isinstance(src, Sequence):
        cfg = {"candidates": list(to_plain(src))}
    else:
        raise PoolConfigError(where, f"expected a pool file path, a mapping or a candidate list, got {type(src).__name__}")
    if not isinstance(cfg, Mapping):
        raise PoolConfigError(where, f"expected a mapping with 'candidates', got {type(cfg).__name__}")
    specs = cfg.get("candidates")
    if not isinstance(specs, list) or not specs:
        raise PoolConfigError(f"{where}.candidates", "expected a non-empty list of candidates")
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise PoolConfigError(f"{where}.candidates[{i}]", f"expected a mapping with a 'name', got {spec!r:.80}")
    return dict(cfg)


def _resolve_paths(cfg: Any, root: Path | None, where: str) -> Any:
    """A pool file written for the Hydra jobs names its files ``${paths.shared_data}/...`` (conf/pool/*.yaml);
    outside Hydra (the Serve app) the ``paths`` are resolved as conf/paths/default.yaml resolves them for a
    job: against ``RLROUTER_ROOT``, else ``root``, else the working directory."""
    from omegaconf import OmegaConf  # the Hydra jobs' config library; the lent GPU machine has none
    from omegaconf.errors import OmegaConfBaseException

    base = str(project_root() or root or Path.cwd())
    try:
        node = OmegaConf.create({"paths": {"root_dir": base, "shared_data": f"{base}/../shared/data"}, "pool": cfg})
        return OmegaConf.to_container(node.pool, resolve=True)
    except OmegaConfBaseException as e:
        raise PoolConfigError(where, f"an interpolation does not resolve outside the Hydra jobs ({e}); the app "
                                     "knows ${paths.root_dir} and ${paths.shared_data}") from None


def candidate_from_spec(spec: Mapping[str, Any], where: str) -> Candidate:
    """Build a ``Candidate`` from a config mapping; every error names ``where.<field>``."""
    if not isinstance(spec, Mapping):
        raise PoolConfigError(where, f"expected a mapping with {CANDIDATE_FIELDS[:3]}, got {type(spec).__name__}")
    for k in spec:
        if k not in CANDIDATE_FIELDS:
            raise PoolConfigError(f"{where}.{k}", f"unknown field; expected one of {CANDIDATE_FIELDS}")
    for k in ("name", "price_in", "price_out"):
        if k not in spec or spec[k] is None:
            raise PoolConfigError(f"{where}.{k}", "required")
    name = spec["name"]
    if not isinstance(name, str) or not name.strip() or name != name.strip() or ":" in name:
        # the policy writes "<search>NAME: query</search>", so a colon or padding would break parsing
        raise PoolConfigError(f"{where}.name", f"expected a non-empty name without ':' or padding, got {name!r}")
    for k in ("price_in", "price_out", "params_b"):
        if k in spec and spec[k] is not None and (not _number(spec[k]) or spec[k] < 0):
            raise PoolConfigError(f"{where}.{k}", f"expected a number >= 0 (USD per 1M tokens / billions), "
                                                  f"got {spec[k]!r}")
    backend = spec.get("backend", "replay")
    if backend not in BACKENDS:
        raise PoolConfigError(f"{where}.backend", f"unknown '{backend}', expected one of {BACKENDS}")
    options = spec.get("options") or {}
    if not isinstance(options, Mapping):
        raise PoolConfigError(f"{where}.options", f"expected a mapping, got {type(options).__name__}")
    desc = spec.get("description") or ""
    if not isinstance(desc, str):
        raise PoolConfigError(f"{where}.description", f"expected a string, got {desc!r}")
    return Candidate(name=name, price_in=float(spec["price_in"]), price_out=float(spec["price_out"]),
                     params_b=float(spec.get("params_b") or 0.0), backend=backend, description=desc,
                     options=dict(options))


class CandidatePool:
    """Named candidates and their backends; ``route`` answers a batch of route calls."""

    def __init__(self, candidates: Sequence[Candidate], max_concurrency: int = 16,
                 call_timeout_s: float | None = None, backends: Mapping[str, Backend] | None = None):
        if not candidates:
            raise ValueError("pool.candidates: at least one candidate is needed")
        if max_concurrency < 1:
            raise ValueError(f"pool.max_concurrency: must be >= 1, got {max_concurrency}")
        self.candidates: dict[str, Candidate] = {}
        for c in candidates:
            if c.name in self.candidates:
                raise ValueError(f"pool.candidates: duplicate name '{c.name}'")
            self.candidates[c.name] = c
        self.max_concurrency = max_concurrency
        self.call_timeout_s = call_timeout_s
        given = dict(backends or {})
        self._backends: dict[str, Backend] = {}
        for c in candidates:
            self._backends[c.name] = given.pop(c.name) if c.name in given else backend_class(c.backend)(c)
        if given:
            raise ValueError(f"backends: {sorted(given)} name no candidate of the pool")
        # one semaphore per event loop: asyncio primitives cannot be shared between loops
        self._sems: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = \
            weakref.WeakKeyDictionary()
        self._bg_loop: asyncio.AbstractEventLoop | None = None
        self._bg_thread: threading.Thread | None = None
        self._bg_lock = threading.Lock()
        # calls in flight right now / the most seen at once: lets tests and metrics check the bound
        self.in_flight = 0
        self.peak_in_flight = 0

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: Any, where: str = "pool") -> CandidatePool:
        """Build from a config node ``{candidates: [...], max_concurrency, call_timeout_s}``.

        Every mistake raises ``PoolConfigError`` naming the field, e.g. ``pool.candidates[1].price_in``
        or ``pool.candidates[0].options.base_url``.
        """
        cfg = to_plain(cfg)
        if not isinstance(cfg, Mapping):
            raise PoolConfigError(where, f"expected a mapping, got {type(cfg).__name__}")
        for k in cfg:
            if k not in POOL_FIELDS:
                raise PoolConfigError(f"{where}.{k}", f"unknown field; expected one of {POOL_FIELDS}")
        specs = cfg.get("candidates")
        if not isinstance(specs, list) or not specs:
            raise PoolConfigError(f"{where}.candidates", "expected a non-empty list of candidates")
        mc = cfg.get("max_concurrency", 16)
        if not isinstance(mc, int) or isinstance(mc, bool) or mc < 1:
            raise PoolConfigError(f"{where}.max_concurrency", f"expected an int >= 1, got {mc!r}")
        timeout = cfg.get("call_timeout_s")
        if timeout is not None and (not _number(timeout) or timeout <= 0):
            raise PoolConfigError(f"{where}.call_timeout_s", f"expected a number > 0 or null, got {timeout!r}")
        candidates, backends, seen = [], {}, {}
        for i, spec in enumerate(specs):
            here = f"{where}.candidates[{i}]"
            c = candidate_from_spec(spec, here)
            if c.name in seen:
                raise PoolConfigError(f"{here}.name", f"duplicate '{c.name}' (also {where}.candidates[{seen[c.name]}])")
            seen[c.name] = i
            try:
                backends[c.name] = backend_class(c.backend)(c)
            except OptionError as e:
                raise PoolConfigError(f"{here}.options.{e.field}", e.message) from e
            candidates.append(c)
        return cls(candidates, max_concurrency=mc, call_timeout_s=timeout, backends=backends)

    # -- lookup -----------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.candidates)

    def __contains__(self, name: object) -> bool:
        return name in self.candidates

    def __len__(self) -> int:
        return len(self.candidates)

    def get(self, name: str) -> Candidate:
        """The candidate called ``name``; a KeyError lists the known names."""
        try:
            return self.candidates[name]
        except KeyError:
            raise KeyError(f"unknown candidate '{name}'; known: {self.names}") from None

    def backend(self, name: str) -> Backend:
        self.get(name)
        return self._backends[name]

    def describe(self) -> list[dict[str, Any]]:
        """Name, prices and size of each candidate, for the policy's prompt and ``GET /v1/models``."""
        return [{"name": c.name, "price_in": c.price_in, "price_out": c.price_out, "params_b": c.params_b,
                 "backend": c.backend, "description": c.description} for c in self.candidates.values()]

    # -- routing ----------------------------------------------------------------------------------
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop not in self._sems:
            self._sems[loop] = asyncio.Semaphore(self.max_concurrency)
        return self._sems[loop]

    async def _run(self, backend: Backend, idx: list[int], queries: list[str],
                   out: list[CandidateResponse | None], kwargs: dict[str, Any]) -> None:
        name = backend.candidate.name
        async with self._semaphore():
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                coro = backend.generate([queries[i] for i in idx], **kwargs)
                resps = await (asyncio.wait_for(coro, self.call_timeout_s) if self.call_timeout_s else coro)
                if not isinstance(resps, list) or len(resps) != len(idx):
                    raise RuntimeError(f"backend returned {len(resps) if isinstance(resps, list) else resps!r} "
                                       f"responses for {len(idx)} prompts")
            except asyncio.TimeoutError:
                resps = [CandidateResponse(text="", error=f"'{name}': no answer within {self.call_timeout_s:g}s")
                         for _ in idx]
            except Exception as e:  # noqa: BLE001 - a backend bug must not end the rollout
                resps = [CandidateResponse(text="", error=f"'{name}': {type(e).__name__}: {e}") for _ in idx]
            finally:
                self.in_flight -= 1
        for i, r in zip(idx, resps, strict=True):
            out[i] = r

    async def route(self, calls: Sequence[tuple[str, str]], **kwargs: Any) -> list[CandidateResponse]:
        """Answer ``(model, query)`` calls concurrently; one response per call, in order, never raises.

        ``kwargs`` (e.g. ``max_tokens``) reach every backend's ``generate``.
        """
        out: list[CandidateResponse | None] = [None] * len(calls)
        groups: dict[str, list[int]] = {}
        queries: list[str] = [""] * len(calls)
        for i, call in enumerate(calls):
            try:
                name, query = call
            except (TypeError, ValueError):
                out[i] = CandidateResponse(text="", error=f"malformed route call {call!r}: expected (model, query)")
                continue
            if not isinstance(name, str) or not isinstance(query, str):
                out[i] = CandidateResponse(text="",
                                           error=f"malformed route call {call!r}: model and query must be text")
                continue
            name = name.strip()
            if name not in self._backends:
                out[i] = CandidateResponse(text="", error=f"unknown model '{name}'; the candidates are {self.names}")
                continue
            queries[i] = query
            groups.setdefault(name, []).append(i)
        tasks = []
        for name, idx in groups.items():
            b = self._backends[name]
            chunks = [idx] if getattr(b, "batches", False) else [[i] for i in idx]
            tasks += [self._run(b, ch, queries, out, kwargs) for ch in chunks]
        if tasks:
            await asyncio.gather(*tasks)
        return [r if r is not None else CandidateResponse(text="", error="no response") for r in out]

    async def generate(self, name: str, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        """Every prompt to one candidate (same guarantees as ``route``)."""
        return await self.route([(name, p) for p in prompts], **kwargs)

    # -- chat completions for the Serve proxy ----------------------------------------------------
    async def chat(self, name: str, messages: list[dict[str, Any]], **params: Any) -> tuple[CandidateResponse, dict]:
        """One chat completion from ``name``: (response, OpenAI ``chat.completion`` dict naming ``name``).

        OpenAI-compatible candidates forward the full conversation and their JSON passes through (with
        ``model`` set to the candidate); others answer the last user message. Never raises: an error
        is in ``response.error`` (and the dict is empty).
        """
        if name not in self._backends:
            return CandidateResponse(text="", error=f"unknown model '{name}'; the candidates are {self.names}"), {}
        b = self._backends[name]
        try:
            async with self._semaphore():
                if hasattr(b, "chat"):
                    r, data = await b.chat(messages, **params)
                    if r.ok:
                        data = {**data, "model": name, "x_cost_usd": r.cost}
                    return r, data
                query = last_user_text(messages)
                r = (await b.generate([query], **params))[0]
        except Exception as e:  # noqa: BLE001
            return CandidateResponse(text="", error=f"'{name}': {type(e).__name__}: {e}"), {}
        return r, (completion_dict(name, r) if r.ok else {})

    async def stream(self, name: str, messages: list[dict[str, Any]], **params: Any) -> AsyncIterator[dict]:
        """Chat-completion chunks from ``name``: a live stream for OpenAI-compatible and vLLM candidates,
        else (replays) the whole answer as role / content / finish chunks. Raises ``KeyError`` for an unknown model and
        ``RuntimeError`` for a failed call, so the proxy can answer 404 / 502 before streaming starts.
        """
        b = self.backend(name)
        if hasattr(b, "stream"):
            async with self._semaphore():
                async for chunk in b.stream(messages, **params):
                    yield {**chunk, "model": name}
            return
        r, _ = await self.chat(name, messages, **params)
        if not r.ok:
            raise RuntimeError(r.error)
        for chunk in chunk_dicts(name, r):
            yield chunk

    # -- sync callers -----------------------------------------------------------------------------
    def _background_loop(self) -> asyncio.AbstractEventLoop:
        # One long-lived loop for sync callers: HTTP clients bind to a loop, so a fresh asyncio.run per
        # call would reopen every connection. It also works when the caller already runs a loop.
        with self._bg_lock:
            if self._bg_loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="candidate-pool", daemon=True)
                t.start()
                self._bg_loop, self._bg_thread = loop, t
            return self._bg_loop

    def route_sync(self, calls: Sequence[tuple[str, str]], timeout: float | None = None,
                   **kwargs: Any) -> list[CandidateResponse]:
        """``route`` for non-async callers (rollout workers, scripts)."""
        fut: Future = asyncio.run_coroutine_threadsafe(self.route(calls, **kwargs), self._background_loop())
        return fut.result(timeout)

    async def close(self) -> None:
        for b in self._backends.values():
            try:
                await b.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def close_sync(self) -> None:
        """Close backends (on the background loop too) and stop that loop."""
        if self._bg_loop is not None:
            asyncio.run_coroutine_threadsafe(self.close(), self._bg_loop).result(30)
            self._bg_loop.call_soon_threadsafe(self._bg_loop.stop)
            if self._bg_thread is not None:
                self._bg_thread.join(5)
            self._bg_loop = None
            self._bg_thread = None
        else:
            asyncio.run(self.close())
