"""The router service: the roles of the HTTP API, composed; what the Serve ingress wraps. No Ray imports.

Each endpoint reads in one module:

- ``/route``, ``/stats``: :mod:`rlrouter.serving.routing` (the selector; GMTRouter and LLM routing first)
- ``model: "router-<name>-<threshold>"`` (``/route`` and chat): :mod:`rlrouter.serving.router_models`
- ``/feedback``: :mod:`rlrouter.serving.feedback`
- ``/v1/chat/completions``, ``/v1/models``: :mod:`rlrouter.serving.chat` (the proxy, streaming, arena)
- ``/router_r1/route``, ``/router_r1/health``: :mod:`rlrouter.serving.router_r1`
- ``/classify``: :mod:`rlrouter.serving.intent`
- GMTRouter's decision: :mod:`rlrouter.serving.gmt`

They share a :class:`~rlrouter.serving.context.ServiceContext` (selector client, configs, candidates,
pool). The selector is reached through a :class:`~rlrouter.serving.selector_client.SelectorClient`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from rlrouter.routers.saved import Manifest
from rlrouter.selector.config import SelectorConfig
from rlrouter.serving.auth import Principal
from rlrouter.serving.chat import SPECIAL_MODELS, ChatProxy
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.context import ServiceContext
from rlrouter.serving.errors import ApiError
from rlrouter.serving.feedback import FeedbackRole
from rlrouter.serving.gmt import GMTRole
from rlrouter.serving.intent import IntentRole
from rlrouter.serving.router_models import RouterModels
from rlrouter.serving.router_r1 import RouterR1Role
from rlrouter.serving.router_r1_client import RouterR1Policy
from rlrouter.serving.routing import Routing
from rlrouter.serving.traffic import TrafficLog
from rlrouter.serving.schemas import (
    ChatCompletionRequest,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    ModelList,
    RouteRequest,
    RouteResponse,
    RouterR1RouteRequest,
    RouterR1RouteResponse,
)
from rlrouter.serving.selector_client import (
    LocalSelectorClient,
    SelectorClient,
    run_selector_call,
    unwrap,
)

__all__ = ["ApiError", "LocalSelectorClient", "RouterService", "SPECIAL_MODELS", "SelectorClient",
           "run_selector_call", "unwrap"]


class RouterService:
    def __init__(self, selector: SelectorClient, selector_config: SelectorConfig, serving: ServingConfig,
                 candidates: list[str], pool: Any = None, router_r1_policy: RouterR1Policy | None = None,
                 encoder: Any = None, classifier: Any = None, reward_fn: Any = None,
                 gmt: Any = None, intent: Any = None, name_map: dict[str, str] | None = None,
                 ingress_ports: Callable[[], Awaitable[list[int]]] | None = None,
                 served_routers: Any = None, router_manifests: Mapping[str, Manifest] | None = None):
        """``gmt``: async ``score(user_id, query) -> {llm: score}`` (KeyError for an unknown user), the
        trained GMTRouter; ``intent``: async ``classify(texts) -> [(label, confidence)]``, the intent
        classifier (its label fills the selector's category scope); ``name_map``: candidate name -> the
        routers' model name (the logged name); ``ingress_ports``: the app's direct-ingress HTTP ports
        (serve/app.py asks the Serve controller), shown on ``/health``; ``served_routers``: async
        ``decide``/``feedback`` of the routers saved by jobs/train_router.py
        (:class:`~rlrouter.serving.served_routers.ServedRouters`), ``router_manifests`` their manifests."""
        judge = serving.traffic.judge if serving.traffic.enabled else None
        if judge is not None and judge not in candidates:
            raise ValueError(f"serving.traffic.judge: '{judge}' is not a candidate of the pool ({list(candidates)})")
        # the judge grades replies; requests are not routed to it
        self.ctx = ServiceContext(selector, selector_config, serving, [c for c in candidates if c != judge], pool,
                                  encoder, TrafficLog(serving.traffic) if serving.traffic.enabled else None)
        self.intent = IntentRole(self.ctx, intent)
        self.router_r1 = RouterR1Role(self.ctx, router_r1_policy)
        self.gmt = GMTRole(self.ctx, gmt, name_map) if gmt is not None else None
        self.routers = RouterModels(self.ctx, served_routers, router_manifests or {}, name_map)
        self.routing = Routing(self.ctx, self.router_r1, self.intent, self.gmt, self.routers)
        self.feedback_role = FeedbackRole(self.ctx, classifier, reward_fn, self.routers)
        self.chat_proxy = ChatProxy(self.ctx, self.routing)
        self.ingress_ports = ingress_ports

    @property
    def serving(self) -> ServingConfig:
        return self.ctx.serving

    @property
    def candidates(self) -> list[str]:
        return self.ctx.candidates

    async def route(self, body: RouteRequest, principal: Principal) -> RouteResponse:
        return await self.routing.route(body, principal)

    async def stats(self, principal: Principal) -> dict[str, Any]:
        return await self.routing.stats(principal)

    async def budgets(self, principal: Principal, end_user: str | None = None) -> dict[str, Any]:
        """``GET /v1/budgets``."""
        ctx = self.routing.ctx
        if not ctx.serving.budgets.enabled:
            return {"enabled": False, "accounts": []}
        out = {"enabled": True, "accounts": await ctx.selector.call("budget_accounts", user=principal.user_id,
                                                                   end_user=end_user)}
        if principal.admin:
            out["all"] = await ctx.selector.call("budget_summary")
        return out

    async def feedback(self, body: FeedbackRequest, principal: Principal) -> FeedbackResponse:
        return await self.feedback_role.feedback(body, principal)

    async def chat(self, body: ChatCompletionRequest, principal: Principal,
                   session_header: str | None = None) -> tuple[dict[str, Any] | AsyncIterator[bytes], dict[str, str]]:
        return await self.chat_proxy.chat(body, principal, session_header)

    def models(self) -> ModelList:
        return self.chat_proxy.models()

    async def router_r1_route(self, body: RouterR1RouteRequest, principal: Principal | None) -> RouterR1RouteResponse:
        return await self.router_r1.route(body, principal)

    def router_r1_health(self) -> dict[str, str]:
        return self.router_r1.health()

    async def router_status(self) -> dict[str, Any]:
        """``GET /v1/routers``: each served router's versions and releases."""
        if self.routers.host is None:
            return {"routers": {}}
        return await self.routers.status()

    async def router_release(self, name: str, action: str, body: Mapping[str, Any] | None,
                             principal: Principal) -> dict[str, Any]:
        """``POST /v1/routers/<name>/versions|promote|rollback``: admin keys only."""
        if not principal.admin:
            raise ApiError(403, "field 'authorization': releasing a router version takes an admin API key",
                           "authorization")
        return await self.routers.release(name, action, body)

    async def classify(self, texts: list[str]) -> list[dict[str, Any]]:
        return await self.intent.classify(texts)

    async def health(self, port: int | None = None) -> Health:
        """``GET /health``: the ingress answers and the selector actor responds; the ports in use."""
        try:
            await asyncio.wait_for(self.ctx.selector.call("ping"), 5.0)
            sel = "ok"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            sel = f"unavailable: {type(e).__name__}"
        direct = None
        if self.ingress_ports is not None:
            try:
                direct = await asyncio.wait_for(self.ingress_ports(), 5.0)
            except Exception:  # noqa: BLE001 - a port lookup never fails liveness
                direct = None
        return Health(status="ok" if sel == "ok" else "degraded", candidates=len(self.ctx.candidates), selector=sel,
                      port=port, direct_ingress_ports=direct)
