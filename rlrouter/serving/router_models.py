"""The served-routers role: a ``router-...`` model name decides through a router trained by
jobs/train_router.py (``rlrouter.serving.served_routers``), for ``/route`` and chat completions alike.

The router picks one of its own candidates (the logged names it was trained on); the pool candidate
that logs under that name serves the call (``options.model`` of a replay candidate, else the same
name). The decision is registered with the app's selector (mode ``router:<name>``) so ``/feedback``
works as for any decision: ownership, one feedback per decision, durable, and the selector's
posteriors learn from it. The feedback then reaches the router: one that learns online (the bandit
selector) updates; a frozen one says so in the answer's ``router`` field.

Releases: ``POST /v1/routers/<name>/versions`` loads a retrained router folder as a new version and starts
its canary (``rlrouter.serving.release``); ``promote`` and ``rollback`` end it by hand; ``GET /v1/routers``
shows each router's versions and releases. Every decision names its ``version``; the version decisions,
the release events and the rewards each version collected are counted on ``/metrics``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from rlrouter.routers.saved import Manifest
from rlrouter.serving.context import ServiceContext, match_name
from rlrouter.serving.errors import ApiError
from rlrouter.serving.metrics import METRICS
from rlrouter.serving.selector_client import selection_request
from rlrouter.serving.served_routers import SYNTAX, RouterChoice, is_router_model, parse_router_model

MODE_PREFIX = "router:"


def candidate_map(manifests: Mapping[str, Manifest], candidates: list[str],
                  name_map: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """{router: {its candidate name: the pool candidate serving it}}. ``name_map``: pool candidate -> the
    logged name it replays. A threshold router needs its weak and strong candidates in the pool, any other
    router all of its candidates; a ValueError names ``routers.<name>`` otherwise."""
    logged = {v: k for k, v in (name_map or {}).items()}
    out: dict[str, dict[str, str]] = {}
    for name, m in manifests.items():
        needed = [m.weak, m.strong] if m.threshold_router else m.candidate_names
        found = {c: logged.get(c) or match_name(c, candidates) for c in m.candidate_names}
        missing = [c for c in needed if not found[c]]
        if missing:
            raise ValueError(f"routers.{name}: its candidates {missing} are not in the app's pool {candidates} "
                             "(a pool candidate serves a router's candidate when its name, or the options.model "
                             "a replay candidate logs under, is that candidate's name)")
        out[name] = {c: p for c, p in found.items() if p}
    return out


class RouterModels:
    def __init__(self, ctx: ServiceContext, host: Any, manifests: Mapping[str, Manifest],
                 name_map: Mapping[str, str] | None = None):
        """``host``: async ``decide(name, query, **kw)`` and ``feedback(name, request_id, **kw)``
        (:class:`~rlrouter.serving.served_routers.ServedRouters` behind the app's deployment handle)."""
        self.ctx = ctx
        self.host = host
        self.manifests = dict(manifests)
        self.to_candidate = candidate_map(self.manifests, ctx.candidates, name_map)
        self.takes_threshold = {n: m.threshold_router for n, m in self.manifests.items()}

    @property
    def names(self) -> list[str]:
        return sorted(self.manifests)

    def parse(self, model: str | None) -> RouterChoice | None:
        """The router a ``model`` names; None when it is no ``router-...`` name; 400 naming ``model`` when it
        is one but names no served router, or a bad threshold or share."""
        if model is None or not is_router_model(model):
            return None
        try:
            return parse_router_model(model, self.takes_threshold)
        except ValueError as e:
            raise ApiError(400, str(e), "model") from None

    async def decide(self, choice: RouterChoice, query: str, user_id: str, session_id: str | None,
                     category: str | None) -> dict[str, Any]:
        """The router's decision as a selector decision (``model``, ``request_id``, ``mode``, ``scores``)
        plus ``router``: what decided (score, threshold, the share of training prompts it sends to strong)."""
        m = self.manifests[choice.name]
        pin = {"version": choice.version} if choice.version is not None else {}
        out = await self.host.decide(choice.name, query, threshold=choice.threshold,
                                     strong_share=choice.strong_share, user_id=user_id, session_id=session_id,
                                     category=category, **pin)
        if "error" in out:
            raise ApiError(400, f"field 'model': {out['error']}", "model")
        cmap = self.to_candidate[choice.name]
        model = cmap.get(out["candidate"])
        if model is None:  # a router's choice outside the pool: only where the check above let it through
            raise ApiError(502, f"router '{choice.name}' chose '{out['candidate']}', which no pool candidate serves",
                           type_="upstream_error")
        cands = list(dict.fromkeys(cmap.values()))
        req = selection_request(cands, user_id, session_id, category, await self.ctx.embedding(query))
        dec = await self.ctx.selector.call("register", req=req, model=model, mode=f"{MODE_PREFIX}{choice.name}",
                                           request_id=out.get("request_id"))
        info: dict[str, Any] = {"name": choice.name, "type": m.type, "online": m.online, "version": out.get("version"),
                                "candidate": out["candidate"], "weak": cmap.get(m.weak), "strong": cmap.get(m.strong)}
        METRICS.observe_router_decision(choice.name, str(out.get("version")))
        if out.get("propensity") is not None:
            dec["propensity"] = out["propensity"]
        for k in ("score", "threshold", "strong_share", "training_strong_share", "report", "selector_mode"):
            v = out.get(k)
            if isinstance(v, float) and not math.isfinite(v):
                v = None  # JSON has no infinity: share 0 (threshold +inf), an intent category never priced
            if v is not None:
                info[k] = v
        if "score" in out:
            # how much the query needs the strong candidate
            dec["scores"] = {cmap[m.strong]: out["score"]} if math.isfinite(out["score"]) else {}
        elif out.get("scores"):
            dec["scores"] = {cmap[c]: float(v) for c, v in out["scores"].items() if c in cmap}
        dec["router"] = info
        return dec

    async def feedback(self, mode: str | None, request_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """Pass a decision's feedback on to the router that made it (None: no served router made it)."""
        if not mode or not mode.startswith(MODE_PREFIX):
            return None
        name = mode[len(MODE_PREFIX):]
        if name not in self.manifests:
            return {"name": name, "learned": False, "note": f"router '{name}' is no longer served"}
        fb = {k: kwargs.get(k) for k in ("outcome", "label", "confidence", "reward")}
        out = await self.host.feedback(name, request_id, **fb, cost=self.ctx.call_costs.get(request_id))
        rel = out.get("release")
        if rel is not None:
            v = rel["versions"].get(out.get("version")) or {}
            METRICS.observe_release_reward(name, str(out.get("version")), v.get("mean"))
        if out.get("event"):
            METRICS.observe_release_event(out["event"])
        return out

    async def status(self) -> dict[str, Any]:
        """``GET /v1/routers``."""
        return await self.host.status()

    async def release(self, name: str, action: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``POST /v1/routers/<name>/versions`` (``action`` load), ``.../promote`` or ``.../rollback``; a bad
        request is a 400 naming its field, an unknown router a 404."""
        if name not in self.manifests:
            raise ApiError(404, f"field 'name': no served router '{name}' (served: {self.names})", "name")
        args = dict(body or {})
        if action == "load":
            out = await self.host.release(name, "load", args)
        else:
            out = await self.host.release(name, action, {"reason": args.get("reason") or "by an operator"})
        if "error" in out:
            raise ApiError(400, out["error"], out.get("field"))
        METRICS.observe_release_event(out["event"])
        return out

    def unknown_model_hint(self) -> str:
        return f"; or a served router ({self.names}): {SYNTAX}" if self.manifests else ""
