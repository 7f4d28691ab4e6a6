"""The chat proxy role: ``POST /v1/chat/completions`` (OpenAI-compatible) and ``GET /v1/models``.

``model: "auto"`` routes (``rlrouter.serving.routing``) and proxies to the chosen candidate through
the pool, streaming or not; ``enable_multi_round_aggregation`` or ``model: "arena"`` call several
candidates in parallel and aggregate their answers; a candidate's name proxies to it directly;
``model: "router-<name>[-<threshold>|-share<s>]"`` lets a served router pick the candidate
(``rlrouter.serving.router_models``).

A replay candidate knows only logged prompts (any other prompt used to get a 200 whose content was
"[replay] no logged answer"). With ``serving.replay_miss: fallthrough`` the decision for ``auto`` and
``arena`` is made among the candidates that can answer the prompt (live ones, and replays that logged
it: ``ServiceContext.answerable``, which ``/route`` uses too); a replay named directly, or chosen under
``replay_miss: error``, is a 404 that says so.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from rlrouter.selector.aggregate import aggregate
from rlrouter.serving.auth import Principal
from rlrouter.serving.context import ServiceContext, match_name, session_key
from rlrouter.serving.errors import ApiError, candidate_error, public_text
from rlrouter.serving.routing import Routing
from rlrouter.serving.schemas import ChatCompletionRequest, ModelCard, ModelList

SPECIAL_MODELS = ("auto", "arena")


def _delta_text(chunk: dict[str, Any]) -> str:
    """The content a chat-completion chunk adds (empty for role and finish chunks)."""
    try:
        return chunk["choices"][0]["delta"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


class ChatProxy:
    def __init__(self, ctx: ServiceContext, routing: Routing):
        self.ctx = ctx
        self.routing = routing

    def models(self) -> ModelList:
        """``GET /v1/models``: ``auto``, ``arena``, ``router-<name>`` per served router and the candidates with
        their prices."""
        cards = [ModelCard(id=m) for m in SPECIAL_MODELS]
        cards += [ModelCard(id=f"router-{n}") for n in self.routing.routers.names]
        pool = self.ctx.pool
        desc = {d["name"]: d for d in pool.describe()} if pool is not None else {}
        for m in self.ctx.candidates:
            d = desc.get(m, {})
            cards.append(ModelCard(id=m, price_in=d.get("price_in"), price_out=d.get("price_out")))
        return ModelList(data=cards)

    def _miss_error(self, missed: list[str]) -> ApiError:
        live = [m for m in self.ctx.candidates if not hasattr(self.ctx.pool.backend(m), "lookup")]
        hint = f"ask a live candidate ({live}) or model 'auto'" if live else "this server has no live candidate"
        return ApiError(404, f"field 'messages': {missed} replay logged answers and have none for this prompt; "
                             f"{hint}", "messages", type_="replay_miss")

    @staticmethod
    def _params(body: ChatCompletionRequest) -> dict[str, Any]:
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
        ctx = self.ctx
        if ctx.pool is None:
            raise ApiError(503, "no candidate pool is configured on this server", type_="server_error")
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        from rlrouter.pool.chat import last_user_text

        query = last_user_text(messages)
        ctx.check_query(query, "messages")
        if body.n is not None and body.n != 1:
            # every candidate is asked once and its one answer returned: n choices would need n calls
            raise ApiError(400, f"field 'n': only n=1 is supported (one choice per request), got n={body.n}; "
                                "send n=1 or leave it out", "n")
        end_user = None
        if ctx.serving.openai_user == "user_id":
            user = principal.user_for(body.user, "user")
        else:  # OpenAI's user tags the caller's end user; the key says who the caller is
            user, end_user = principal.user_id, body.user
        session = body.session_id or session_header
        params = self._params(body)
        name = match_name(body.model, [*SPECIAL_MODELS, *ctx.candidates])
        among: list[str] | None = None  # the candidates that can answer this prompt, where known
        choice = self.routing.routers.parse(body.model) if name is None else None
        if name is None and choice is None:
            raise ApiError(404, f"field 'model': unknown model '{body.model}'; use 'auto', 'arena' or one of "
                                f"{ctx.candidates}{self.routing.routers.unknown_model_hint()}", "model")
        if choice is not None:  # a served router picks between its candidates, RouteLLM's router-<name>-<threshold>
            dec = await self.routing.routers.decide(choice, query, user, session, body.category)
            models = [dec["model"]]
            if not (await ctx.answerable(query, models))[0]:
                raise self._miss_error(models)
            gate = await ctx.budget_gate(user, end_user, query, models)
        elif name not in SPECIAL_MODELS:
            if not (await ctx.answerable(query, [name]))[0]:
                raise self._miss_error([name])
            gate = await ctx.budget_gate(user, end_user, query, [name])
            dec = None
            models = [name]
        else:
            how = "all" if name == "arena" else self.routing.how()
            can, missed = await ctx.answerable(query, ctx.candidates)
            cands = None
            among = can
            if ctx.serving.replay_miss == "fallthrough":
                if not can:
                    raise self._miss_error(missed)
                cands = can
            gate = await ctx.budget_gate(user, end_user, query, cands or ctx.candidates)
            if gate is not None:  # only the candidates every budget of this request can pay for
                cands = [m for m in (cands or ctx.candidates) if m in gate["fit"]]
            dec = await self.routing.decide(query, user, session, body.category, cands, how,
                                            session=session_key(user, session, messages))
            models = dec.get("models") or [dec["model"]]
            chosen_missed = [m for m in models if m in missed]
            if chosen_missed:  # replay_miss: error
                raise self._miss_error(chosen_missed)
        ctx.budget_enforce(gate, models)
        headers = {}
        meta: dict[str, Any] = {}
        if dec is not None:
            headers = {"X-RLRouter-Request-Id": dec["request_id"], "X-RLRouter-Model": dec["model"],
                       "X-RLRouter-Mode": dec["mode"]}
            meta = {"request_id": dec["request_id"], "mode": dec["mode"], "scores": dec["scores"]}
            if dec.get("fallback_reason"):
                meta["fallback_reason"] = dec["fallback_reason"]
            if dec.get("router"):
                meta["router"] = dec["router"]
            if dec.get("expected_latency"):
                meta["expected_latency"] = dec["expected_latency"]
            if dec.get("affinity"):
                meta["affinity"] = dec["affinity"]
                headers["X-RLRouter-Affinity"] = dec["affinity"]["outcome"]
        if gate is not None:
            meta["budget"] = {"estimated_usd": sum(gate["estimates"].get(m, 0.0) for m in models),
                              "accounts": [{k: a[k] for k in ("budget", "period", "limit_usd", "spent_usd",
                                                              "remaining_usd", "resets_at")} for a in gate["accounts"]]}
        if end_user is not None:
            meta["end_user"] = end_user
        # the traffic log's record of this request: its id (a decision's, else a new one), who, what
        log = {"request_id": dec["request_id"] if dec is not None else f"chat-{uuid.uuid4().hex}", "user": user,
               "endpoint": "chat", "prompt": query, "decision": ctx.decision_record(dec, models[0]), "budget": gate}
        if len(models) > 1:
            data = await self._fan_out(dec, models, messages, params, meta, log)
            headers["X-RLRouter-Model"] = data["model"]
            if body.stream:
                return self._replay_stream(data), headers
            return data, headers
        model = models[0]
        if body.stream:
            return await self._stream(model, messages, params, meta, log, dec), headers
        t0 = time.perf_counter()
        r, data = await asyncio.wait_for(ctx.pool.chat(model, messages, **params), ctx.serving.proxy_timeout_s)
        if r.ok:
            ctx.observe_latency(model, time.perf_counter() - t0)
        call = ctx.call_record(model, r)
        await ctx.log_request(**log, calls=[call])
        if dec is not None:  # a routed request: maybe a judge's grade and a counterfactual reply too
            judged = ctx.judge(log["request_id"], messages, [call])
            ctx.explore(log["request_id"], model, messages, params, among, judged=judged)
        if not r.ok:
            await self._pin_failed(dec, model)
            raise candidate_error(model, str(r.error))
        data = {**data, "model": model}
        if meta:
            data["x_rlrouter"] = meta
        return data, headers

    async def _pin_failed(self, dec: dict[str, Any] | None, model: str) -> None:
        """The pinned candidate's call failed: with ``selector.affinity_move_on_error`` the session's next turn
        decides afresh."""
        if dec is not None and dec.get("affinity"):
            await self.ctx.selector.call("affinity_error", session_key=dec["session_key"], model=model)

    async def _fan_out(self, dec: dict[str, Any], models: list[str], messages: list[dict[str, Any]],
                       params: dict[str, Any], meta: dict[str, Any], log: dict[str, Any]) -> dict[str, Any]:
        """Multi-round / arena: call ``models`` in parallel, aggregate, record the returned model."""
        ctx = self.ctx
        results = await asyncio.gather(*[asyncio.wait_for(ctx.pool.chat(m, messages, **params),
                                                          ctx.serving.proxy_timeout_s) for m in models],
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
        await ctx.log_request(**log, calls=[{"model": m, "error": f"{type(res).__name__}: {res}"}
                                            if isinstance(res, BaseException) else ctx.call_record(m, res[0])
                                            for m, res in zip(models, results)])
        refused = {m: candidate_error(m, e) for m, e in errors.items()}
        errors = {m: public_text(e) for m, e in errors.items()}
        if not answers:
            if all(e.status < 500 for e in refused.values()):
                raise next(iter(refused.values()))  # the input itself, refused by every candidate
            raise ApiError(502, f"every candidate failed: {errors}", type_="upstream_error")
        texts = {m: d["choices"][0]["message"]["content"] or "" for m, d in answers.items()}
        agg = aggregate(texts, dec["scores"], ctx.serving.aggregation)
        await ctx.selector.call("set_chosen", request_id=dec["request_id"], model=agg.model)
        data = {**answers[agg.model], "model": agg.model}
        data["x_rlrouter"] = {**meta, "aggregation": agg.strategy, "votes": agg.votes, "models": models,
                              "answers": texts, "errors": errors}
        return data

    async def _stream(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                      meta: dict[str, Any], log: dict[str, Any], dec: dict[str, Any] | None = None) -> AsyncIterator[bytes]:
        """The candidate's chunks as SSE. The first chunk is awaited here, before the 200 goes out, so a
        call that fails from the start (a prompt over the context, a candidate down) gets its status."""
        t0 = time.perf_counter()
        chunks = self.ctx.pool.stream(model, messages, **params)
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            first = None
        except Exception as e:  # noqa: BLE001 - the candidate's failure, mapped to a status
            await self._pin_failed(dec, model)
            raise candidate_error(model, str(e) or type(e).__name__) from None
        return self._sse_stream(model, first, chunks, meta, log, messages, params, dec,
                                (t0, time.perf_counter() - t0))

    async def _sse_stream(self, model: str, first: dict[str, Any] | None, chunks: AsyncIterator[dict[str, Any]],
                          meta: dict[str, Any], log: dict[str, Any], messages: list[dict[str, Any]],
                          params: dict[str, Any], dec: dict[str, Any] | None = None,
                          started: tuple[float, float] | None = None) -> AsyncIterator[bytes]:
        """``started``: when the call began and the seconds to its first chunk (the latency measured)."""
        t0, text, usage, error = time.perf_counter(), [], None, None
        try:
            if first is not None:
                text.append(_delta_text(first))
                yield _sse({**first, **({"x_rlrouter": meta} if meta else {}), "model": model})
                async for chunk in chunks:
                    text.append(_delta_text(chunk))
                    usage = chunk.get("usage") or usage
                    yield _sse({**chunk, "model": model})
        except Exception as e:  # noqa: BLE001 - the status is sent already: report in-band, as OpenAI does
            err = candidate_error(model, str(e) or type(e).__name__)
            error = err.message
            yield _sse({"error": {"message": err.message, "type": err.type, "param": err.field,
                                  "code": err.code or err.status}})
        usage = usage or {}
        call = {"model": model, "reply": "".join(text), "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0), "latency_s": time.perf_counter() - t0,
                **({"error": error} if error else {})}
        await self.ctx.log_request(**log, calls=[call])  # on disk before the stream's end is acknowledged
        if error:
            await self._pin_failed(dec, model)
        elif started is not None:
            self.ctx.observe_latency(model, time.perf_counter() - started[0], started[1])
        if log["decision"]["router"] != "caller":
            judged = self.ctx.judge(log["request_id"], messages, [call])
            self.ctx.explore(log["request_id"], model, messages, params, judged=judged)
        yield b"data: [DONE]\n\n"

    async def _replay_stream(self, data: dict[str, Any]) -> AsyncIterator[bytes]:
        """An aggregated (already complete) answer as an SSE stream of three chunks."""
        rid = data.get("id") or f"chatcmpl-{uuid.uuid4().hex[:24]}"
        base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": data["model"]}
        content = data["choices"][0]["message"]["content"] or ""
        yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}], "x_rlrouter": data.get("x_rlrouter")})
        yield _sse({**base, "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]})
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": data.get("usage")})
        yield b"data: [DONE]\n\n"
