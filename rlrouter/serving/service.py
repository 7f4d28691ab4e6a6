"""Request -> decision logic of the Serve app, without Ray: what each HTTP endpoint does.

:class:`RouterService` is what the ingress deployment wraps. It talks to the selector through a
:class:`SelectorClient` (``call(method, **kwargs)``): in the Serve app that is the single selector
actor behind a ``DeploymentHandle``; in unit tests a :class:`LocalSelectorClient` around a
:class:`~rlrouter.selector.Selector`. Calls travel as an *envelope* (``run_selector_call``), so
selector errors cross the Ray boundary as plain data and come back as :class:`ApiError` with the
right status and field.

Per request:
- ``/route``: auth'd user -> LLM routing (Router-R1 server, with timeout and fallback) if enabled,
  else the bandit (contextual mode embeds the query with MiniLM first).
- ``/feedback``: ownership check, then (implicit) classify the follow-up, or compute the Router-R1
  reward, then the selector logs (fsync) and applies; the reply comes after that.
- ``/v1/chat/completions``: route, then proxy to the chosen candidate through the pool (streaming or
  not); ``enable_multi_round_aggregation`` or ``model: "arena"`` call several candidates in parallel
  and aggregate their answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from rlrouter.selector.aggregate import aggregate
from rlrouter.selector.config import SelectorConfig
from rlrouter.selector.selector import SelectionRequest, Selector, SelectorError
from rlrouter.serving.auth import Principal
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.router_r1_client import (
    HTTPRouterR1Client,
    RouterR1Policy,
    RouterR1Unavailable,
    match_candidate,
)
from rlrouter.serving.schemas import (
    ChatCompletionRequest,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    ModelCard,
    ModelList,
    PosteriorDelta,
    RouteRequest,
    RouteResponse,
    RouterR1RouteRequest,
    RouterR1RouteResponse,
)

SPECIAL_MODELS = ("auto", "arena")


class ApiError(Exception):
    """An error the API reports as ``{"error": {...}}`` with ``status``."""

    def __init__(self, status: int, message: str, field: str | None = None, type_: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        self.type = type_ or ("invalid_request_error" if 400 <= status < 500 else "server_error")
        super().__init__(message)


# ----------------------------------------------------------------------------- selector calls

SELECTOR_METHODS = ("select", "select_top_k", "select_all", "register", "set_chosen", "feedback",
                    "pending_info", "stats", "ping")


def run_selector_call(selector: Selector, method: str, kwargs: dict[str, Any]) -> tuple:
    """Run one selector method; returns ``("ok", value)`` or ``("error", status, field, message)``.

    Used inside the selector actor: plain tuples cross the Ray boundary without exception pickling.
    """
    if method not in SELECTOR_METHODS:
        return ("error", 500, None, f"unknown selector method '{method}'")
    try:
        if method == "ping":
            return ("ok", {"selections": selector.state.selections})
        if method == "pending_info":
            dec = selector.pending(kwargs["request_id"])
            return ("ok", {"model": dec.model, "models": list(dec.models), "mode": dec.mode, "user_id": dec.user_id,
                           "answered": dec.feedback_seq is not None})
        if method == "feedback":
            owner = kwargs.pop("owner", None)
            admin = kwargs.pop("admin", False)
            dec = selector.pending(kwargs["request_id"])
            if not admin and dec.user_id is not None and dec.user_id != owner:
                return ("error", 403, "request_id",
                        f"request '{kwargs['request_id']}' was routed for another user; this key may not give its feedback")
            u = selector.feedback(**kwargs)
            return ("ok", {"kind": u.kind, "detail": u.detail,
                           "deltas": [{"model": d.model, "d_alpha": d.d_alpha, "d_beta": d.d_beta} for d in u.deltas],
                           "durable": bool(selector.config.storage_path)})
        if method in ("select", "select_top_k", "select_all", "register"):
            kwargs = dict(kwargs)
            kwargs["req"] = SelectionRequest(**kwargs["req"])
        value = getattr(selector, method)(**kwargs)
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        return ("ok", value)
    except SelectorError as e:
        return ("error", e.status, e.field, str(e))


def unwrap(envelope: tuple) -> Any:
    if envelope[0] == "ok":
        return envelope[1]
    _, status, field, message = envelope
    raise ApiError(status, message, field)


class SelectorClient(Protocol):
    async def call(self, method: str, **kwargs: Any) -> Any: ...


class LocalSelectorClient:
    """In-process selector (tests, single-process use); blocking work runs in a thread."""

    def __init__(self, selector: Selector):
        self.selector = selector

    async def call(self, method: str, **kwargs: Any) -> Any:
        if method == "feedback":
            # the fsync must not stall the event loop
            return unwrap(await asyncio.to_thread(run_selector_call, self.selector, method, kwargs))
        return unwrap(run_selector_call(self.selector, method, kwargs))


# ----------------------------------------------------------------------------- the service


def _req_dict(candidates: list[str] | None, user_id: str | None, session_id: str | None,
              category: str | None, embedding: list[float] | None) -> dict[str, Any]:
    return {"candidates": candidates or [], "user_id": user_id, "session_id": session_id, "category": category,
            "embedding": embedding}


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


class RouterService:
    def __init__(self, selector: SelectorClient, selector_config: SelectorConfig, serving: ServingConfig,
                 candidates: list[str], pool: Any = None, router_r1_policy: RouterR1Policy | None = None,
                 encoder: Any = None, classifier: Any = None, reward_fn: Any = None,
                 gmt: Any = None, intent: Any = None, name_map: dict[str, str] | None = None):
        """``gmt``: async ``score(user_id, query) -> {llm: score}`` (KeyError for an unknown user), the
        trained GMTRouter; ``intent``: async ``classify(texts) -> [(label, confidence)]``, the intent
        classifier (its label fills the selector's category scope); ``name_map``: the routers' model
        names (logged names) -> candidate names."""
        self.gmt = gmt
        self.intent = intent
        self.name_map = {v: k for k, v in (name_map or {}).items()}
        self.selector = selector
        self.cfg = selector_config
        self.serving = serving
        self.candidates = list(candidates)
        self.pool = pool
        self.router_r1_policy = router_r1_policy
        self.llm_router: RouterR1Policy | None = None
        if self.cfg.enable_llm_routing and self.cfg.router_r1_server_url:
            self.llm_router = HTTPRouterR1Client(self.cfg.router_r1_server_url, self.cfg.llm_routing_timeout_s)
        self._encoder = encoder
        self._classifier = classifier
        self._reward_fn = reward_fn
        self._lazy_lock = asyncio.Lock()

    # -- lazily loaded models ---------------------------------------------------------------------
    def encoder(self) -> Any:
        if self._encoder is None:
            from rlrouter.selector.embedding import MiniLMEncoder

            self._encoder = MiniLMEncoder(self.serving.encoder)
        return self._encoder

    async def classifier(self) -> Any:
        if self._classifier is None:
            async with self._lazy_lock:
                if self._classifier is None:
                    from rlrouter.selector.implicit import ImplicitFeedbackClassifier

                    enc = self.encoder()
                    self._classifier = await asyncio.to_thread(
                        ImplicitFeedbackClassifier, enc.encode, None, self.serving.implicit_temperature)
        return self._classifier

    def reward_fn(self) -> Any:
        if self._reward_fn is None:
            from rlrouter.rewards.router_r1 import RouterR1Reward

            self._reward_fn = RouterR1Reward(alpha=self.cfg.cost_reward_alpha, candidates=self.candidates)
        return self._reward_fn

    # -- helpers ------------------------------------------------------------------------------------
    def _check_query(self, text: str, field: str) -> None:
        if len(text) > self.serving.max_query_chars:
            raise ApiError(422, f"field '{field}': longer than {self.serving.max_query_chars} characters", field)

    async def _embedding(self, query: str) -> list[float] | None:
        if not self.cfg.use_contextual:
            return None
        vec = await asyncio.to_thread(self.encoder().encode_one, query)
        return [float(x) for x in vec]

    def _candidates(self, requested: list[str] | None) -> list[str]:
        if requested is None:
            return list(self.candidates)
        unknown = [c for c in requested if c not in self.candidates]
        if unknown:
            raise ApiError(422, f"field 'candidates': unknown candidate(s) {unknown}; known: {self.candidates}",
                           "candidates")
        return list(requested)

    async def decide(self, query: str, user_id: str, session_id: str | None, category: str | None,
                     candidates: list[str] | None, how: str = "single") -> dict[str, Any]:
        """One decision; ``how``: single (LLM routing or bandit), top_k (multi-round), all (arena)."""
        cands = self._candidates(candidates)
        emb = await self._embedding(query)
        req = _req_dict(cands, user_id, session_id, category, emb)
        if how == "top_k":
            return await self.selector.call("select_top_k", req=req)
        if how == "all":
            return await self.selector.call("select_all", req=req)
        fallback_reason = None
        if self.gmt is not None:
            dec = await self._gmt_decide(query, user_id, cands, req)
            if dec is not None:
                return dec
        if self.llm_router is not None:
            try:
                ans = await asyncio.wait_for(self.llm_router.route(query), self.cfg.llm_routing_timeout_s)
                model = match_candidate(ans.selected_model, cands)
                if model is None:
                    raise RouterR1Unavailable(f"selected '{ans.selected_model}', not one of {cands}")
                dec = await self.selector.call("register", req=req, model=model, mode="llm_routing",
                                               detail={"thinking": ans.thinking[:2000]})
                return dec
            except (RouterR1Unavailable, asyncio.TimeoutError) as e:
                reason = str(e) or f"no answer within {self.cfg.llm_routing_timeout_s:g}s"
                if self.cfg.llm_routing_fallback == "error":
                    raise ApiError(503, f"LLM routing failed: {reason}", type_="router_unavailable") from None
                fallback_reason = f"LLM routing failed ({reason}); fell back to thompson sampling"
        dec = await self.selector.call("select", req=req)
        if fallback_reason:
            dec["fallback_reason"] = fallback_reason
        return dec

    async def _gmt_decide(self, query: str, user_id: str, cands: list[str], req: Any) -> dict[str, Any] | None:
        """GMTRouter's choice for a user it knows (issue 6); None for an unknown user (bandit decides)."""
        try:
            raw = await self.gmt.score(user_id, query)
        except KeyError:
            return None
        scores = {self.name_map.get(m, m): float(v) for m, v in raw.items()}
        known = {c: scores[c] for c in cands if c in scores}
        if not known:
            return None
        model = max(known, key=known.get)
        dec = await self.selector.call("register", req=req, model=model, mode="gmtrouter",
                                       detail={"gmt_scores": known})
        dec["scores"] = known
        return dec

    async def classify(self, texts: list[str]) -> list[dict[str, Any]]:
        """The intent classifier's label and confidence per text (``POST /classify``)."""
        if self.intent is None:
            raise ApiError(404, "no intent classifier is configured (serve config: intent.checkpoint)",
                           type_="not_configured")
        for i, t in enumerate(texts):
            self._check_query(t, f"texts[{i}]")
        return [{"label": label, "confidence": float(conf)} for label, conf in await self.intent.classify(texts)]

    # -- endpoints ----------------------------------------------------------------------------------
    async def route(self, body: RouteRequest, principal: Principal) -> RouteResponse:
        self._check_query(body.query, "query")
        user = principal.user_for(body.user_id)
        how = "top_k" if self.cfg.enable_multi_round_aggregation else "single"
        category = body.category
        if category is None and self.intent is not None:
            category = (await self.intent.classify([body.query]))[0][0]
        dec = await self.decide(body.query, user, body.session_id, category, body.candidates, how)
        return RouteResponse(model=dec["model"], request_id=dec["request_id"], mode=dec["mode"],
                             scores=dec["scores"], models=dec.get("models") or [dec["model"]],
                             fallback_reason=dec.get("fallback_reason"))

    async def feedback(self, body: FeedbackRequest, principal: Principal) -> FeedbackResponse:
        info = await self.selector.call("pending_info", request_id=body.request_id)
        if not principal.admin and info["user_id"] not in (None, principal.user_id):
            raise ApiError(403, f"field 'request_id': request '{body.request_id}' was routed for another user; "
                                "this API key may not give its feedback", "request_id")
        if info["answered"]:
            raise ApiError(409, f"field 'request_id': feedback for '{body.request_id}' was already recorded",
                           "request_id")
        kwargs: dict[str, Any] = {"request_id": body.request_id, "owner": principal.user_id,
                                  "admin": principal.admin, "winner": body.winner}
        label = confidence = reward = None
        if body.outcome is not None:
            kwargs["outcome"] = body.outcome
        elif body.followup_text is not None:
            self._check_query(body.followup_text, "followup_text")
            clf = await self.classifier()
            res = await asyncio.to_thread(clf.classify, body.followup_text)
            label, confidence = res.label, res.confidence
            kwargs.update(label=label, confidence=confidence)
        else:
            if not self.cfg.use_router_r1_rewards:
                raise ApiError(422, "field 'reward': Router-R1 reward feedback is off (use_router_r1_rewards: false)",
                               "router_r1" if body.router_r1 is not None else "reward")
            reward = body.reward if body.reward is not None else self._router_r1_reward(body, info)
            kwargs["reward"] = reward
        res = await self.selector.call("feedback", **kwargs)
        return FeedbackResponse(request_id=body.request_id, kind=res["kind"], durable=res["durable"],
                                applied=[PosteriorDelta(**d) for d in res["deltas"]], label=label,
                                confidence=confidence, reward=reward)

    def _router_r1_reward(self, body: FeedbackRequest, info: dict[str, Any]) -> float:
        """Router-R1 reward (rlrouter.rewards) of the trajectory; a format failure gives the configured penalty."""
        rr = body.router_r1
        assert rr is not None
        cols: dict[str, Any] = {"ground_truth": [rr.ground_truth]}
        if self.cfg.cost_reward_alpha > 0:
            if rr.route_costs is None:
                raise ApiError(422, "field 'router_r1.route_costs': required when cost_reward_alpha > 0",
                               "router_r1.route_costs")
            cols["route_costs"] = [rr.route_costs]
        try:
            score = self.reward_fn().score([None], [rr.completion], **cols)[0]
        except (KeyError, ValueError, TypeError) as e:
            raise ApiError(422, f"field 'router_r1': {e}", "router_r1") from None
        if score.format < 0:
            return float(self.cfg.format_reward_penalty)
        return float(score.total)

    async def stats(self, principal: Principal) -> dict[str, Any]:
        return await self.selector.call("stats", user_id=principal.user_id, all_users=principal.admin)

    def models(self) -> ModelList:
        cards = [ModelCard(id=m) for m in SPECIAL_MODELS]
        desc = {d["name"]: d for d in self.pool.describe()} if self.pool is not None else {}
        for m in self.candidates:
            d = desc.get(m, {})
            cards.append(ModelCard(id=m, price_in=d.get("price_in"), price_out=d.get("price_out")))
        return ModelList(data=cards)

    async def health(self) -> Health:
        try:
            await asyncio.wait_for(self.selector.call("ping"), 5.0)
            sel = "ok"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            sel = f"unavailable: {type(e).__name__}"
        return Health(status="ok" if sel == "ok" else "degraded", candidates=len(self.candidates), selector=sel)

    async def router_r1_route(self, body: RouterR1RouteRequest, principal: Principal | None) -> RouterR1RouteResponse:
        """VSR's Router-R1 protocol, backed by the Router-R1 policy when one is configured, else the selector."""
        self._check_query(body.query, "query")
        if self.router_r1_policy is not None:
            try:
                ans = await asyncio.wait_for(self.router_r1_policy.route(body.query), self.cfg.llm_routing_timeout_s)
            except (RouterR1Unavailable, asyncio.TimeoutError) as e:
                raise ApiError(503, f"Router-R1 policy unavailable: {e}", type_="router_unavailable") from None
            return RouterR1RouteResponse(selected_model=ans.selected_model, thinking=ans.thinking,
                                         full_response=ans.full_response, backend="router_r1_policy")
        user = principal.user_id if principal is not None else None
        req = _req_dict(self.candidates, user, None, None, await self._embedding(body.query))
        dec = await self.selector.call("select", req=req)
        scores = ", ".join(f"{m}={s:.3f}" for m, s in sorted(dec["scores"].items()))
        thinking = (f"No Router-R1 policy is configured on this server; the rl_driven selector decided "
                    f"({dec['mode']}: {scores}).")
        full = f"<think>{thinking}</think>\n<answer>{dec['model']}</answer>"
        return RouterR1RouteResponse(selected_model=dec["model"], thinking=thinking, full_response=full,
                                     backend="selector", request_id=dec["request_id"])

    def router_r1_health(self) -> dict[str, str]:
        model = self.router_r1_policy.name if self.router_r1_policy is not None else "rl_driven-selector"
        return {"status": "ok", "model": model}

    # -- chat completions -----------------------------------------------------------------------------
    def _params(self, body: ChatCompletionRequest) -> dict[str, Any]:
        extra = dict(body.model_extra or {})
        for k in ("stream_options",):
            extra.pop(k, None)
        if body.max_tokens is not None:
            extra["max_tokens"] = body.max_tokens
        if body.temperature is not None:
            extra["temperature"] = body.temperature
        return extra

    async def chat(self, body: ChatCompletionRequest, principal: Principal,
                   session_header: str | None = None) -> tuple[dict[str, Any] | AsyncIterator[bytes], dict[str, str]]:
        """Returns (completion dict, or an SSE byte stream when ``stream``) and the response headers."""
        if self.pool is None:
            raise ApiError(503, "no candidate pool is configured on this server", type_="server_error")
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        from rlrouter.pool.chat import last_user_text

        query = last_user_text(messages)
        self._check_query(query, "messages")
        user = principal.user_for(body.user, "user")
        session = body.session_id or session_header
        params = self._params(body)
        if body.model not in SPECIAL_MODELS:
            if body.model not in self.candidates:
                raise ApiError(404, f"field 'model': unknown model '{body.model}'; "
                                    f"use 'auto', 'arena' or one of {self.candidates}", "model")
            dec = None
            models = [body.model]
        else:
            how = "all" if body.model == "arena" else ("top_k" if self.cfg.enable_multi_round_aggregation else "single")
            dec = await self.decide(query, user, session, body.category, None, how)
            models = dec.get("models") or [dec["model"]]
        headers = {}
        meta: dict[str, Any] = {}
        if dec is not None:
            headers = {"X-RLRouter-Request-Id": dec["request_id"], "X-RLRouter-Model": dec["model"],
                       "X-RLRouter-Mode": dec["mode"]}
            meta = {"request_id": dec["request_id"], "mode": dec["mode"], "scores": dec["scores"]}
            if dec.get("fallback_reason"):
                meta["fallback_reason"] = dec["fallback_reason"]
        if len(models) > 1:
            data = await self._fan_out(dec, models, messages, params, meta)
            headers["X-RLRouter-Model"] = data["model"]
            if body.stream:
                return self._replay_stream(data), headers
            return data, headers
        model = models[0]
        if body.stream:
            return self._stream(model, messages, params, meta), headers
        r, data = await asyncio.wait_for(self.pool.chat(model, messages, **params), self.serving.proxy_timeout_s)
        if not r.ok:
            raise ApiError(502, f"candidate '{model}' failed: {r.error}", type_="upstream_error")
        data = {**data, "model": model}
        if meta:
            data["x_rlrouter"] = meta
        return data, headers

    async def _fan_out(self, dec: dict[str, Any], models: list[str], messages: list[dict[str, Any]],
                       params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """Multi-round / arena: call ``models`` in parallel, aggregate, record the returned model."""
        results = await asyncio.gather(*[asyncio.wait_for(self.pool.chat(m, messages, **params),
                                                          self.serving.proxy_timeout_s) for m in models],
                                       return_exceptions=True)
        answers: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        for m, res in zip(models, results):
            if isinstance(res, BaseException):
                errors[m] = f"{type(res).__name__}: {res}"
            elif not res[0].ok:
                errors[m] = str(res[0].error)
            else:
                answers[m] = res[1]
        if not answers:
            raise ApiError(502, f"every candidate failed: {errors}", type_="upstream_error")
        texts = {m: d["choices"][0]["message"]["content"] or "" for m, d in answers.items()}
        agg = aggregate(texts, dec["scores"], self.serving.aggregation)
        await self.selector.call("set_chosen", request_id=dec["request_id"], model=agg.model)
        data = {**answers[agg.model], "model": agg.model}
        data["x_rlrouter"] = {**meta, "aggregation": agg.strategy, "votes": agg.votes, "models": models,
                              "answers": texts, "errors": errors}
        return data

    async def _stream(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                      meta: dict[str, Any]) -> AsyncIterator[bytes]:
        first = True
        try:
            async for chunk in self.pool.stream(model, messages, **params):
                if first and meta:
                    chunk = {**chunk, "x_rlrouter": meta}
                first = False
                yield _sse({**chunk, "model": model})
        except Exception as e:  # noqa: BLE001 - the status is sent already: report in-band, as OpenAI does
            yield _sse({"error": {"message": f"candidate '{model}' failed: {e}", "type": "upstream_error", "code": 502}})
        yield b"data: [DONE]\n\n"

    async def _replay_stream(self, data: dict[str, Any]) -> AsyncIterator[bytes]:
        rid = data.get("id") or f"chatcmpl-{uuid.uuid4().hex[:24]}"
        base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": data["model"]}
        content = data["choices"][0]["message"]["content"] or ""
        yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}], "x_rlrouter": data.get("x_rlrouter")})
        yield _sse({**base, "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]})
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": data.get("usage")})
        yield b"data: [DONE]\n\n"
