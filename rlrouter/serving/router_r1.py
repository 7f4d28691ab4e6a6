"""The Router-R1 role: LLM routing inside ``/route`` and the VSR-facing ``POST /router_r1/route``.

- LLM routing (``enable_llm_routing`` + ``router_r1_server_url``): a Router-R1 server picks the
  candidate, with a timeout; a failure falls back to the bandit or is a 503 (``llm_routing_fallback``).
  Without a server URL, the app's own policy (VSR's ``router_model_path``) picks it in-process.
- ``/router_r1/route`` speaks the Router-R1 server protocol of the vLLM Semantic Router, backed by a
  Router-R1 policy deployment when one is configured, else by the selector (and says which).

VSR's client (``RouterR1Client`` in semantic-router ``pkg/selection``; ``selectWithRouterR1`` builds the
query) sends ``{"query": "Task: <decision>\nAvailable models: a, b"}`` and keeps ``selected_model`` only
if it names one of its own candidates. So that shape is parsed (:func:`parse_offer`): the answer is
always one of the offered models, in the caller's spelling, after ``serving.model_map`` maps the
caller's names to this server's candidates; the decision name is the selector's category scope.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from rlrouter.serving.auth import Principal
from rlrouter.serving.context import ServiceContext, match_name
from rlrouter.serving.errors import ApiError
from rlrouter.serving.router_r1_client import (
    HTTPRouterR1Client,
    InProcessRouterR1,
    RouterR1Policy,
    RouterR1Unavailable,
    match_candidate,
)
from rlrouter.serving.schemas import RouterR1RouteRequest, RouterR1RouteResponse
from rlrouter.serving.selector_client import selection_request


_OFFER = re.compile(r"\ATask: (?P<task>[^\n]*)\nAvailable models: (?P<models>[^\n]*)\s*\Z")


@dataclass(frozen=True)
class Offer:
    """What a VSR-shaped query asks: a decision (task) and the models the caller can use."""

    task: str
    models: list[str]


def parse_offer(query: str) -> Offer | None:
    """``Task: <decision>\nAvailable models: a, b`` -> Offer; None for any other query."""
    m = _OFFER.match(query)
    if m is None:
        return None
    return Offer(m["task"].strip(), [x.strip() for x in m["models"].split(",") if x.strip()])


def offered_candidates(offer: Offer, candidates: list[str], model_map: dict[str, str]) -> dict[str, str]:
    """Candidate name -> the caller's name, for each offered model this server can route to."""
    out: dict[str, str] = {}
    for name in offer.models:
        cand = match_name(model_map.get(name, name), candidates)
        if cand is not None and cand not in out:
            out[cand] = name
    return out


class RouterR1Role:
    def __init__(self, ctx: ServiceContext, policy: RouterR1Policy | None = None):
        """``policy``: the Router-R1 policy answering ``/router_r1/route`` (None: the selector answers)."""
        self.ctx = ctx
        self.policy = policy
        cfg = ctx.cfg
        self.llm_router: RouterR1Policy | None = None
        if cfg.enable_llm_routing and cfg.router_r1_server_url:
            self.llm_router = HTTPRouterR1Client(cfg.router_r1_server_url, cfg.llm_routing_timeout_s)
        elif cfg.enable_llm_routing and policy is not None:
            # VSR's router_model_path: the app's own policy decides /route in-process
            self.llm_router = InProcessRouterR1(policy)

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
        """``POST /router_r1/route``: the Router-R1 policy's choice, else the selector's; among the offered
        models when the query is VSR's ``Task: ...\nAvailable models: ...``."""
        ctx = self.ctx
        ctx.check_query(body.query, "query")
        offer = parse_offer(body.query)
        to_caller = {c: c for c in ctx.candidates}
        category = None
        if offer is not None:
            to_caller = offered_candidates(offer, ctx.candidates, ctx.serving.model_map)
            if not to_caller:
                raise ApiError(422, f"field 'query': none of the available models {offer.models} is a candidate "
                                    f"here ({ctx.candidates}); map them in serving.model_map", "query")
            category = offer.task or None
        cands = list(to_caller)
        note = ""
        if self.policy is not None:
            try:
                ans = await asyncio.wait_for(self.policy.route(body.query), ctx.cfg.llm_routing_timeout_s)
            except (RouterR1Unavailable, asyncio.TimeoutError) as e:
                reason = str(e) or (f"no answer within {ctx.cfg.llm_routing_timeout_s:g}s "
                                    "(selector.llm_routing_timeout_s; a cascade decision on CPU takes seconds)")
                raise ApiError(503, f"Router-R1 policy unavailable: {reason}", type_="router_unavailable") from None
            model = match_candidate(ans.selected_model or "", cands)
            if model is not None:
                return RouterR1RouteResponse(selected_model=to_caller[model], thinking=ans.thinking,
                                             full_response=ans.full_response, backend="router_r1_policy")
            note = f"The Router-R1 policy chose {ans.selected_model!r}, which is not offered; "
        user = principal.user_id if principal is not None else None
        req = selection_request(cands, user, None, category, await ctx.embedding(body.query))
        dec = await ctx.selector.call("select", req=req)
        chosen = to_caller[dec["model"]]
        scores = ", ".join(f"{to_caller[m]}={s:.3f}" for m, s in sorted(dec["scores"].items()))
        if self.policy is None:
            note = "No Router-R1 policy is configured on this server; "
        thinking = f"{note}the rl_driven selector decided ({dec['mode']}: {scores})."
        full = f"<think>{thinking}</think>\n<answer>{chosen}</answer>"
        return RouterR1RouteResponse(selected_model=chosen, thinking=thinking, full_response=full,
                                     backend="selector", request_id=dec["request_id"])

    def health(self) -> dict[str, str]:
        model = self.policy.name if self.policy is not None else "rl_driven-selector"
        return {"status": "ok", "model": model}
