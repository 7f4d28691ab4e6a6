"""The selector role: one routing decision, ``POST /route`` and ``GET /stats``.

A request whose ``model`` names a served router (``router-<name>[-<threshold>|-share<s>]``,
``rlrouter.serving.router_models``) is decided by that router. Otherwise a decision goes, in order:
GMTRouter for a user it knows (when configured), LLM routing through a Router-R1 server (when enabled,
with its fallback), else the bandit (contextual mode embeds the query
with MiniLM first). ``how="top_k"`` (multi-round aggregation) and ``how="all"`` (arena) ask the
selector for several candidates at once.

``/route`` decides among the candidates that can answer the query, as the chat proxy's ``auto`` does
(``ServiceContext.answerable``: a replay candidate knows only its logged prompts), so calling the
chosen model works. When none can (or under ``serving.replay_miss: error``) it still decides, among
all, and says in ``replay_miss`` why the chosen one cannot answer.
"""

from __future__ import annotations

from typing import Any

from rlrouter.serving.auth import Principal
from rlrouter.serving.context import ServiceContext, session_key
from rlrouter.serving.errors import ApiError
from rlrouter.serving.gmt import GMTRole
from rlrouter.serving.intent import IntentRole
from rlrouter.serving.router_models import RouterModels
from rlrouter.serving.router_r1 import RouterR1Role
from rlrouter.serving.schemas import RouteRequest, RouteResponse
from rlrouter.serving.selector_client import selection_request
from rlrouter.serving.served_routers import SYNTAX


class Routing:
    def __init__(self, ctx: ServiceContext, router_r1: RouterR1Role, intent: IntentRole, gmt: GMTRole | None = None,
                 routers: RouterModels | None = None):
        self.ctx = ctx
        self.router_r1 = router_r1
        self.intent = intent
        self.gmt = gmt
        self.routers = routers or RouterModels(ctx, None, {})

    async def decide(self, query: str, user_id: str, session_id: str | None, category: str | None,
                     candidates: list[str] | None, how: str = "single", session: str | None = None) -> dict[str, Any]:
        """One decision; ``how``: single (GMTRouter, LLM routing or bandit), top_k (multi-round), all (arena).
        ``session``: the conversation's key (``context.session_key``); with ``selector.session_affinity`` a
        single decision then goes to the session's pinned candidate unless a rule lets it move."""
        dec = await self._decide(query, user_id, session_id, category, candidates, how)
        if session and how == "single" and self.ctx.cfg.session_affinity:
            dec = await self.stick(dec, session)
        return dec

    async def stick(self, dec: dict[str, Any], session: str) -> dict[str, Any]:
        """Session affinity on one decision: the pin's verdict in ``dec["affinity"]``. A turn that went to
        the pin carries propensity 1 when no score can move it (``affinity_margin`` null), else none known."""
        v = await self.ctx.selector.call("stick", request_id=dec["request_id"], session_key=session,
                                         scores=dec.get("scores") or {})
        expected = v.pop("expected_latency", None)
        dec = {**dec, "affinity": v, "session_key": session}
        if v["outcome"] in ("kept", "held"):
            dec["propensity"] = 1.0 if self.ctx.cfg.affinity_margin is None else None
        if v["model"] != dec["model"]:
            dec.update(model=v["model"], models=[v["model"]], expected_latency=expected)
        return dec

    async def _decide(self, query: str, user_id: str, session_id: str | None, category: str | None,
                      candidates: list[str] | None, how: str) -> dict[str, Any]:
        ctx = self.ctx
        cands = ctx.candidates_for(candidates)
        req = selection_request(cands, user_id, session_id, category, await ctx.embedding(query))
        if how == "top_k":
            return await ctx.selector.call("select_top_k", req=req)
        if how == "all":
            return await ctx.selector.call("select_all", req=req)
        if self.gmt is not None:
            dec = await self.gmt.decide(query, user_id, cands, req)
            if dec is not None:
                return dec
        fallback_reason = None
        if self.router_r1.llm_router is not None:
            dec, fallback_reason = await self.router_r1.llm_route(query, cands, req)
            if dec is not None:
                return dec
        dec = await ctx.selector.call("select", req=req)
        if fallback_reason:
            dec["fallback_reason"] = fallback_reason
        return dec

    def how(self) -> str:
        """Single decision, top-k when multi-round aggregation is on, every candidate for VSR's
        ``type: concurrent`` (arena)."""
        if self.ctx.cfg.concurrent:
            return "all"
        return "top_k" if self.ctx.cfg.enable_multi_round_aggregation else "single"

    async def route(self, body: RouteRequest, principal: Principal) -> RouteResponse:
        """``POST /route``."""
        self.ctx.check_query(body.query, "query")
        user = principal.user_for(body.user_id)
        choice = self.routers.parse(body.model)
        if body.model is not None and choice is None and body.model.lower() != "auto":
            raise ApiError(400, f"field 'model': /route takes 'auto' or a served router ({self.routers.names}): "
                                f"{SYNTAX}; got '{body.model}'", "model")
        if choice is not None and body.candidates is not None:
            raise ApiError(400, "field 'candidates': a served router chooses among its own candidates; leave "
                                "candidates out", "candidates")
        category = body.category
        if category is None:
            category = await self.intent.category(body.query)
        if choice is not None:
            dec = await self.routers.decide(choice, body.query, user, body.session_id, category)
            can, missed = await self.ctx.answerable(body.query, [dec["model"]])
        else:
            cands = self.ctx.candidates_for(body.candidates)
            can, missed = await self.ctx.answerable(body.query, cands)
            if can and self.ctx.serving.replay_miss == "fallthrough":
                cands = can
            dec = await self.decide(body.query, user, body.session_id, category, cands, self.how(),
                                    session=session_key(user, body.session_id))
        models = dec.get("models") or [dec["model"]]
        chosen_missed = [m for m in models if m in missed]
        why = None
        if chosen_missed:
            among = ("the served router chose it" if choice is not None
                     else "none of the candidates can answer it" if not can
                     else "serving.replay_miss is 'error', so it was not left out")
            why = (f"{chosen_missed} replay logged answers and have none for this query ({among}); calling "
                   f"it gets a 404 of type replay_miss")
        await self.ctx.log_request(dec["request_id"], user, "route", body.query,
                                   self.ctx.decision_record(dec, dec["model"]))
        if not why:  # the route's counterfactual: another candidate's reply to the query, in the background
            self.ctx.explore(dec["request_id"], dec["model"], [{"role": "user", "content": body.query}], {},
                             can if choice is None else None)
        return RouteResponse(model=dec["model"], request_id=dec["request_id"], mode=dec["mode"],
                             scores=dec["scores"], models=models, fallback_reason=dec.get("fallback_reason"),
                             replay_miss=why, router=dec.get("router"), affinity=dec.get("affinity"),
                             expected_latency=dec.get("expected_latency"))

    async def stats(self, principal: Principal) -> dict[str, Any]:
        """``GET /stats``: the caller's posteriors (admins: every user's)."""
        return await self.ctx.selector.call("stats", user_id=principal.user_id, all_users=principal.admin)
