"""OpenAI-compatible candidate: any ``/v1/chat/completions`` endpoint (OpenAI, vLLM, Together, ...).

Options (``Candidate.options``):

- ``base_url`` (required), e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``;
- ``api_key_env``: name of the env var holding the key (none: no ``Authorization`` header, as local
  servers need); a named variable that is unset fails when the pool is built;
- ``model``: the endpoint's model id (default: the candidate's name);
- ``timeout_s`` (per attempt, default 60), ``connect_timeout_s`` (10);
- ``max_retries`` (3) with exponential backoff from ``backoff_s`` (0.5) up to ``max_backoff_s`` (8),
  on connection errors, timeouts, 429 and 5xx; other 4xx fail at once (retrying cannot fix them);
- ``max_concurrency`` (8): requests in flight to this endpoint (an ``asyncio.Semaphore``);
- ``max_tokens``, ``temperature``, ``system_prompt``, ``extra_body`` (merged into every request),
  ``headers``.

Token counts come from the response's ``usage``; where a server omits it they are estimated
(ceil(chars / 4)). ``stream(messages)`` yields the server's chat-completion chunks for the Serve
proxy; it retries only before the first chunk, since a resent stream would duplicate text.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

import httpx

from rlrouter.config import to_plain
from rlrouter.pool.base import Backend, Candidate, CandidateResponse
from rlrouter.pool.options import OptionError, OptionReader, estimate_tokens, non_negative, positive

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    """A request failed for good (after retries, or a 4xx that retrying cannot fix)."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 1):
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class OpenAIBackend(Backend):
    """Chat completions over HTTP with timeouts, retries and a concurrency bound."""

    batches = False  # one HTTP request per prompt; the pool runs them concurrently

    def __init__(self, candidate: Candidate):
        super().__init__(candidate)
        o = OptionReader(to_plain(candidate.options))
        self.base_url = o.get("base_url", str).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise OptionError("base_url", f"expected an http(s) URL, got {self.base_url!r}")
        self.api_key_env = o.get("api_key_env", str, None)
        self.model = o.get("model", str, candidate.name)
        self.timeout_s = o.get("timeout_s", float, 60.0, positive, expect="a number > 0")
        self.connect_timeout_s = o.get("connect_timeout_s", float, 10.0, positive, expect="a number > 0")
        self.max_retries = o.get("max_retries", int, 3, non_negative, expect="an int >= 0")
        self.backoff_s = o.get("backoff_s", float, 0.5, non_negative, expect="a number >= 0")
        self.max_backoff_s = o.get("max_backoff_s", float, 8.0, non_negative, expect="a number >= 0")
        self.max_concurrency = o.get("max_concurrency", int, 8, positive, expect="an int > 0")
        self.max_tokens = o.get("max_tokens", int, None, positive, expect="an int > 0")
        self.temperature = o.get("temperature", float, None, non_negative, expect="a number >= 0")
        self.system_prompt = o.get("system_prompt", str, None)
        self.extra_body = dict(o.get("extra_body", dict, {}))
        self.headers = {str(k): str(v) for k, v in o.get("headers", dict, {}).items()}
        o.finish()
        self.api_key: str | None = None
        if self.api_key_env:
            self.api_key = os.environ.get(self.api_key_env)
            if not self.api_key:
                raise OptionError("api_key_env", f"environment variable {self.api_key_env} is not set")
        # An httpx client and a semaphore belong to one event loop (route_sync runs its own), so each
        # loop that calls this backend gets its own pair; they go when the loop is collected.
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                                  tuple[httpx.AsyncClient, asyncio.Semaphore]] = \
            weakref.WeakKeyDictionary()

    # -- plumbing ---------------------------------------------------------------------------------
    def _bind(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop not in self._per_loop:
            headers = {"Content-Type": "application/json", **self.headers}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            timeout = httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
            limits = httpx.Limits(max_connections=self.max_concurrency,
                                  max_keepalive_connections=self.max_concurrency)
            client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout, limits=limits)
            self._per_loop[loop] = (client, asyncio.Semaphore(self.max_concurrency))
        return self._per_loop[loop]

    def _body(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        body.update({k: v for k, v in params.items() if v is not None})
        body["model"] = self.model  # the proxy's "auto" must not leak to the endpoint
        return body

    def messages_for(self, prompt: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": prompt}]

    def _backoff(self, attempt: int) -> float:
        # full jitter (AWS architecture blog): spreads the retries of a whole batch that failed at once
        return random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** attempt))

    @staticmethod
    def _error_text(resp: httpx.Response) -> str:
        try:
            err = resp.json().get("error")
            if isinstance(err, dict):
                return str(err.get("message", err))
            if err:
                return str(err)
        except (ValueError, AttributeError):
            pass
        return resp.text[:300]

    async def _send(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """POST once per attempt until success; returns (response JSON, attempts)."""
        client, sem = self._bind()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt - 1))
            try:
                async with sem:
                    resp = await client.post("/chat/completions", json=body)
            except httpx.TimeoutException as e:
                last = f"timeout after {self.timeout_s:g}s ({type(e).__name__})"
                continue
            except httpx.TransportError as e:
                last = f"connection error: {type(e).__name__}: {e}"
                continue
            if resp.status_code == 200:
                try:
                    return resp.json(), attempt + 1
                except ValueError:
                    raise EndpointError(f"HTTP 200 with a body that is not JSON: {resp.text[:200]!r}",
                                        200, attempt + 1) from None
            last = f"HTTP {resp.status_code}: {self._error_text(resp)}"
            if resp.status_code not in RETRY_STATUS:
                raise EndpointError(last, resp.status_code, attempt + 1)
        raise EndpointError(f"{last} (gave up after {self.max_retries + 1} attempts)", None, self.max_retries + 1)

    # -- the Backend contract ---------------------------------------------------------------------
    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> tuple[CandidateResponse, dict[str, Any]]:
        """One non-streaming chat completion; returns the response and the raw JSON (for the proxy)."""
        t0 = time.perf_counter()
        body = self._body(messages, {**params, "stream": None})
        try:
            data, _ = await self._send(body)
            choice = data["choices"][0]
            text = (choice.get("message") or {}).get("content") or ""
        except EndpointError as e:
            return CandidateResponse(text="", latency_s=time.perf_counter() - t0,
                                     error=f"openai '{self.candidate.name}' at {self.base_url}: {e}"), {}
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            return CandidateResponse(text="", latency_s=time.perf_counter() - t0,
                                     error=f"openai '{self.candidate.name}': malformed response ({e!r})"), {}
        usage = data.get("usage") or {}
        p_tok = usage.get("prompt_tokens")
        c_tok = usage.get("completion_tokens")
        if not isinstance(p_tok, int):
            p_tok = estimate_tokens(" ".join(str(m.get("content", "")) for m in messages))
        if not isinstance(c_tok, int):
            c_tok = estimate_tokens(text)
        return CandidateResponse(text=text, prompt_tokens=p_tok, completion_tokens=c_tok,
                                 cost=self.candidate.cost(p_tok, c_tok),
                                 latency_s=time.perf_counter() - t0), data

    async def generate(self, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        async def one(p: str) -> CandidateResponse:
            try:
                return (await self.chat(self.messages_for(p), **kwargs))[0]
            except Exception as e:  # noqa: BLE001 - the contract: never raise
                return CandidateResponse(text="", error=f"openai '{self.candidate.name}': {type(e).__name__}: {e}")

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def stream(self, messages: list[dict[str, Any]], **params: Any) -> AsyncIterator[dict[str, Any]]:
        """Yield the endpoint's ``chat.completion.chunk`` objects (parsed SSE ``data:`` lines).

        Raises ``EndpointError`` if the stream cannot be opened after retries, or breaks midway; the
        proxy turns that into an error event for its client.
        """
        client, sem = self._bind()
        body = self._body(messages, {**params, "stream": True})
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt - 1))
            started = False
            try:
                async with sem, client.stream("POST", "/chat/completions", json=body) as resp:
                    if resp.status_code != 200:
                        await resp.aread()
                        last = f"HTTP {resp.status_code}: {self._error_text(resp)}"
                        if resp.status_code not in RETRY_STATUS:
                            raise EndpointError(last, resp.status_code, attempt + 1)
                        continue
                    async for line in resp.aiter_lines():
                        if not line.startswith("data:"):
                            continue  # SSE comments and blank separators
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            return
                        try:
                            chunk = json.loads(payload)
                        except ValueError:
                            raise EndpointError(f"stream chunk is not JSON: {payload[:200]!r}") from None
                        started = True
                        yield chunk
                    return
            except (httpx.TimeoutException, httpx.TransportError) as e:
                if started:
                    raise EndpointError(f"stream broke after the first chunk: {type(e).__name__}: {e}") from e
                last = f"{type(e).__name__}: {e}"
        raise EndpointError(f"{last} (gave up after {self.max_retries + 1} attempts)")

    async def close(self) -> None:
        """Close this loop's connections (a client can only be closed on the loop that opened it)."""
        pair = self._per_loop.pop(asyncio.get_running_loop(), None)
        if pair is not None:
            await pair[0].aclose()
