"""The Router-R1 role: LLM routing inside ``/route`` and the VSR-facing ``POST /router_r1/route``.

- LLM routing (``enable_llm_routing`` + ``router_r1_server_url``): a Router-R1 server picks the
  candidate, with a timeout; a failure falls back to the bandit or is a 503 (``llm_routing_fallback``).
- ``/router_r1/route`` speaks the Router-R1 server protocol of the vLLM Semantic Router, backed by a
  Router-R1 policy deployment when one is configured, else by the selector (and says which).
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlrouter.serving.auth import Principal
from rlrouter.serving.context import ServiceContext
from rlrouter.serving.errors import ApiError
from rlrouter.serving.router_r1_client import (
    HTTPRouterR1Client,
    RouterR1Policy,
    RouterR1Unavailable,
    match_candidate,
)
from rlrouter.serving.schemas import RouterR1RouteRequest, RouterR1RouteResponse
from rlrouter.serving.selector_client import selection_request


class RouterR1Role:
    def __init__(self, ctx: ServiceContext, policy: RouterR1Policy | None = None):
        """``policy``: the Router-R1 policy answering ``/router_r1/route`` (None: the selector answers)."""
        self.ctx = ctx
        self.policy = policy
        cfg = ctx.cfg
        self.llm_router: RouterR1Policy | None = None
        if cfg.enable_llm_routing and cfg.router_r1_server_url:
            self.llm_router = HTTPRouterR1Client(cfg.router_r1_server_url, cfg.llm_routing_timeout_s)

    async def llm_route(self, query: str, cands: list[str], req: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """LLM routing: ``(decision, None)``, or ``(None, why)`` when it failed and the bandit should decide."""
        cfg = self.ctx.cfg
        try:
            ans = await asyncio.wait_for(self.llm_router.route(query), cfg.llm_routing_timeout_s)
            model = match_candidate(ans.selected_model, cands)
            if model is None:
                raise RouterR1Unavailable(f"selected '{ans.selected_model}', not one of {cands}")
            dec = await self.ctx.selector.call("register", req=req, model=model, mode="llm_routing",
                                               detail={"thinking": ans.thinking[:2000]})
            return dec, None
        except (RouterR1Unavailable, asyncio.TimeoutError) as e:
            reason = str(e) or f"no answer within {cfg.llm_routing_timeout_s:g}s"
            if cfg.llm_routing_fallback == "error":
                raise ApiError(503, f"LLM routing failed: {reason}", type_="router_unavailable") from None
            return None, f"LLM routing failed ({reason}); fell back to thompson sampling"

    async def route(self, body: RouterR1RouteRequest, principal: Principal | None) -> RouterR1RouteResponse:
        """``POST /router_r1/route``: the Router-R1 policy's choice, else the selector's."""
        ctx = self.ctx
        ctx.check_query(body.query, "query")
        if self.policy is not None:
            try:
                ans = await asyncio.wait_for(self.policy.route(body.query), ctx.cfg.llm_routing_timeout_s)
            except (RouterR1Unavailable, asyncio.TimeoutError) as e:
                raise ApiError(503, f"Router-R1 policy unavailable: {e}", type_="router_unavailable") from None
            return RouterR1RouteResponse(selected_model=ans.selected_model, thinking=ans.thinking,
                                         full_response=ans.full_response, backend="router_r1_policy")
        user = principal.user_id if principal is not None else None
        req = selection_request(ctx.candidates, user, None, None, await ctx.embedding(body.query))
        dec = await ctx.selector.call("select", req=req)
        scores = ", ".join(f"{m}={s:.3f}" for m, s in sorted(dec["scores"].items()))
        thinking = (f"No Router-R1 policy is configured on this server; the rl_driven selector decided "
                    f"({dec['mode']}: {scores}).")
        full = f"<think>{thinking}</think>\n<answer>{dec['model']}</answer>"
        return RouterR1RouteResponse(selected_model=dec["model"], thinking=thinking, full_response=full,
                                     backend="selector", request_id=dec["request_id"])

    def health(self) -> dict[str, str]:
        model = self.policy.name if self.policy is not None else "rl_driven-selector"
        return {"status": "ok", "model": model}
