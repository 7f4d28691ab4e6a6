"""Client of the Router-R1 server protocol (vLLM Semantic Router's ``RouterR1Client``).

The protocol: ``POST {base}/route`` with ``{"query": ...}`` answers
``{"selected_model", "thinking", "full_response"}``; ``GET {base}/health`` answers 200. Our own
Serve app speaks it under ``/router_r1``, so ``router_r1_server_url`` may point at
``http://host:port/router_r1`` of this very app, at VSR's reference server, or at a vLLM-served
Router-R1 policy. Any error and any answer later than the timeout raise :class:`RouterR1Unavailable`,
which the serving layer turns into the configured fallback.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import httpx


class RouterR1Unavailable(RuntimeError):
    """The Router-R1 server failed, timed out, or answered something unusable."""


@dataclass
class RouterR1Answer:
    selected_model: str
    thinking: str = ""
    full_response: str = ""


class RouterR1Policy(Protocol):
    """Anything that can make a Router-R1 decision (an HTTP server, a Serve deployment)."""

    name: str

    async def route(self, query: str) -> RouterR1Answer: ...


def match_candidate(selected: str, candidates: list[str]) -> str | None:
    """VSR's rule: the exact name, else a candidate that contains it or that it contains."""
    if selected in candidates:
        return selected
    for c in candidates:
        if selected and (selected in c or c in selected):
            return c
    return None


class InProcessRouterR1:
    """A policy this app already holds (the ``router_r1`` deployment, e.g. from ``router_model_path``) as
    the LLM router of ``/route``: no HTTP round trip back into the app, no auth exemption. Any failure,
    and a policy that answers without routing, is :class:`RouterR1Unavailable` (the caller falls back)."""

    def __init__(self, policy: RouterR1Policy):
        self.policy = policy
        self.name = policy.name

    async def route(self, query: str) -> RouterR1Answer:
        try:
            ans = await self.policy.route(query)
        except RouterR1Unavailable:
            raise
        except Exception as e:  # noqa: BLE001 - a dead replica or a broken checkpoint: fall back, say why
            raise RouterR1Unavailable(f"{self.name}: {type(e).__name__}: {e}") from None
        if not ans.selected_model:
            raise RouterR1Unavailable(f"{self.name}: the policy answered without routing to a candidate")
        return ans


class HTTPRouterR1Client:
    def __init__(self, base_url: str, timeout_s: float = 5.0, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.name = self.base_url
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers)
            self._loop = loop
        return self._client

    async def route(self, query: str) -> RouterR1Answer:
        try:
            resp = await asyncio.wait_for(self._http().post(f"{self.base_url}/route", json={"query": query}),
                                          self.timeout_s)
        except asyncio.TimeoutError:
            raise RouterR1Unavailable(f"{self.base_url}/route: no answer within {self.timeout_s:g}s") from None
        except httpx.HTTPError as e:
            raise RouterR1Unavailable(f"{self.base_url}/route: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise RouterR1Unavailable(f"{self.base_url}/route: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data = resp.json()
            model = data["selected_model"]
            if not isinstance(model, str) or not model:
                raise ValueError("selected_model is empty")
        except (ValueError, KeyError, TypeError) as e:
            raise RouterR1Unavailable(f"{self.base_url}/route: unusable answer ({e})") from None
        return RouterR1Answer(model, str(data.get("thinking", "")), str(data.get("full_response", "")))

    async def health(self) -> bool:
        try:
            resp = await asyncio.wait_for(self._http().get(f"{self.base_url}/health"), self.timeout_s)
            return resp.status_code == 200
        except Exception:  # noqa: BLE001 - health is a yes/no
            return False

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
