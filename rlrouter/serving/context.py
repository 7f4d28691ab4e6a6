"""What every role of the router service shares: the selector client, the configs, the candidates.

Each role (``routing``, ``gmt``, ``intent``, ``router_r1``, ``feedback``, ``chat``) holds one
:class:`ServiceContext`; the helpers here are the checks and lazily loaded models that more than one
role needs (the query-length cap, the candidate restriction, which candidates can answer a query, the
MiniLM encoder of the contextual selector and of the implicit-feedback classifier).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rlrouter.pool.chat import last_user_text
from rlrouter.selector.config import SelectorConfig
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.budgets import estimate_cost
from rlrouter.serving.errors import ApiError, budget_error, context_length_exceeded
from rlrouter.serving.metrics import METRICS
from rlrouter.serving.selector_client import SelectorClient
from rlrouter.serving.traffic import TrafficLog, judge_prompt, parse_grade, prompt_fields


def match_name(name: str, names: list[str]) -> str | None:
    """``name`` as ``names`` spell it: the exact name, else the one name equal to it but for case (model
    names are written with varying case: 'Mixtral-8x7B-Instruct'); None for no match, or several."""
    if name in names:
        return name
    folded = [n for n in names if n.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def session_key(user: str, session_id: str | None, messages: list[dict[str, Any]] | None = None) -> str | None:
    """The conversation a turn belongs to (session affinity, ``rlrouter.selector.affinity``), per caller: its
    ``session_id``; else, for a chat completion, the conversation's opening (the system prompt and the first
    user message), which every later turn repeats. None when there is neither. Two conversations of one
    caller that open with the same words share a pin."""
    if session_id:
        return f"s:{user}:{session_id}"
    if not messages:
        return None
    opening = [m for m in messages if m.get("role") == "system"][:1]
    opening += [m for m in messages if m.get("role") == "user"][:1]
    if not any(m.get("role") == "user" for m in opening):
        return None
    text = json.dumps([user, [[m.get("role"), m.get("content")] for m in opening]], sort_keys=True, default=str)
    return "p:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _refused(account: dict[str, Any], estimate: float) -> ApiError:
    """The 429 of a request ``account`` cannot pay for, counted on ``/metrics``."""
    METRICS.budget_refusals.labels(str(account["budget"])).inc()
    return budget_error(account, estimate)


class CallCosts:
    """request id -> the cost of its calls, the newest ``limit`` requests (older ones are forgotten)."""

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self._d: OrderedDict[str, float] = OrderedDict()

    def put(self, request_id: str, cost: float) -> None:
        self._d[request_id] = cost
        while len(self._d) > self.limit:
            self._d.popitem(last=False)

    def get(self, request_id: str) -> float | None:
        return self._d.get(request_id)


@dataclass
class ServiceContext:
    selector: SelectorClient
    cfg: SelectorConfig
    serving: ServingConfig
    candidates: list[str]
    pool: Any = None
    """The candidate pool (``rlrouter.pool.pool.CandidatePool``) that chat completions proxy to."""
    encoder_: Any = None
    """A sentence encoder given by the caller (tests); None loads ``serving.encoder`` on first use."""
    traffic: TrafficLog | None = None
    """The traffic log when ``serving.traffic.enabled`` (opened by the service); None: nothing is logged."""
    call_costs: CallCosts = field(default_factory=lambda: CallCosts())
    """The cost of each routed request's call, by request id: a served router's release reads it with the
    request's feedback (the reward counts the cost)."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _explorations: set = field(default_factory=set, repr=False)

    async def log_request(self, request_id: str, user: str, endpoint: str, prompt: str, decision: dict[str, Any],
                          calls: list[dict[str, Any]] = (), budget: dict[str, Any] | None = None) -> None:
        """Append a routed request to the traffic log (when on), fsynced before this returns, so before the
        reply goes out. ``decision``: ``decision_record``'s; ``calls``: each candidate called, with its reply,
        tokens, cost and latency. ``budget``: the request's :meth:`budget_gate`, whose accounts are charged
        what the calls cost (in the ledger, fsynced, before this returns)."""
        costs = [c.get("cost") for c in calls if isinstance(c.get("cost"), (int, float))]
        if costs:
            self.call_costs.put(request_id, float(sum(costs)))
        if budget is not None:
            await self._charge(budget, request_id, calls)
        if self.traffic is None:
            return
        cfg = self.traffic.cfg
        emb = None
        if not cfg.store_prompts:
            emb = await asyncio.to_thread(self.encoder().encode_one, prompt)
        rec = {"kind": "request", "id": request_id, "user": user, "endpoint": endpoint,
               **prompt_fields(prompt, cfg.store_prompts, emb), "decision": decision, "calls": list(calls)}
        await asyncio.to_thread(self.traffic.append, rec)

    # ---- budgets (rlrouter.serving.budgets: the ledger is kept by the selector's replica)

    async def budget_gate(self, user: str, end_user: str | None, prompt: str,
                          candidates: list[str]) -> dict[str, Any] | None:
        """Before a decision: the ``candidates`` this request's budgets leave (``fit``), with each one's
        estimated cost; a 429 naming the budget when none is left. None when no budget is configured."""
        cfg = self.serving.budgets
        if not cfg.enabled or self.pool is None:
            return None
        est = {m: estimate_cost(self.pool.get(m).price_in, self.pool.get(m).price_out, prompt, cfg.completion_tokens)
               for m in candidates}
        res = await self.selector.call("budget_check", user=user, end_user=end_user, estimates=est)
        if res["refused"] is not None:
            raise _refused(res["refused"], min(est.values(), default=0.0))
        return {**res, "estimates": est, "user": user, "end_user": end_user}

    @staticmethod
    def budget_enforce(gate: dict[str, Any] | None, models: list[str]) -> None:
        """After a decision: a 429 when calling ``models`` is estimated to take an account over its limit (a
        ``reject`` budget, or several candidates at once)."""
        if gate is None:
            return
        total = sum(gate["estimates"].get(m, 0.0) for m in models)
        for a in gate["accounts"]:
            if total > a["remaining_usd"] and (a["on_exceed"] == "reject" or len(models) > 1):
                raise _refused(a, total)

    async def _charge(self, gate: dict[str, Any], request_id: str, calls: list[dict[str, Any]]) -> None:
        usd = 0.0
        for c in calls:
            cost = c.get("cost")
            if not isinstance(cost, (int, float)) and self.pool is not None and c.get("model") in self.pool:
                cost = self.pool.get(c["model"]).cost(int(c.get("prompt_tokens") or 0),
                                                      int(c.get("completion_tokens") or 0))
            usd += float(cost or 0.0)
        model = ",".join(str(c.get("model")) for c in calls)
        await self.selector.call("budget_charge", user=gate["user"], end_user=gate["end_user"], usd=usd,
                                 request_id=request_id, model=model)

    @staticmethod
    def decision_record(dec: dict[str, Any] | None, model: str) -> dict[str, Any]:
        """What the traffic log keeps of a decision: the model(s), the mode, and the router that made it (a
        served router's name and details; else the mode's maker: the selector, GMTRouter, LLM routing; a
        request that named its model: ``caller``)."""
        if dec is None:
            return {"model": model, "models": [model], "mode": "direct", "router": "caller"}
        info = dec.get("router")
        return {"model": dec["model"], "models": dec.get("models") or [dec["model"]], "mode": dec["mode"],
                "router": info["name"] if isinstance(info, dict) else "selector",
                "propensity": dec.get("propensity"), **({"router_info": info} if isinstance(info, dict) else {})}

    @staticmethod
    def call_record(model: str, r: Any) -> dict[str, Any]:
        """One candidate call for the traffic log (``r``: a ``CandidateResponse``); ``correct`` when the backend
        knows it (a replay of logged outcomes)."""
        return {"model": model, "reply": r.text if r.ok else None, "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens, "cost": r.cost, "latency_s": r.latency_s,
                **({"error": r.error} if r.error else {}),
                **({"correct": bool(r.correct)} if getattr(r, "correct", None) is not None else {})}

    def explore(self, request_id: str, chosen: str, messages: list[dict[str, Any]], params: dict[str, Any],
                candidates: list[str] | None = None, judged: bool | None = None) -> None:
        """With ``serving.traffic.explore_share``, ask a second candidate in the background (the caller's answer
        does not wait) and log its reply as an ``explore`` record of the request; counted on ``/metrics``.
        ``judged``: whether the judge grades this request's replies (None: draw it here, as for ``/route``)."""
        if self.traffic is None or self.pool is None or not self.traffic.cfg.explore_share:
            return
        drawn = self.traffic.explore_target(chosen, candidates or self.candidates)
        if drawn is None:
            return
        second, propensity = drawn

        async def call() -> None:
            try:
                t0 = time.perf_counter()
                r, _ = await asyncio.wait_for(self.pool.chat(second, messages, **params),
                                              self.serving.proxy_timeout_s)
                if r.ok:  # a candidate routed away for its latency is measured again here
                    await self._observe_latency(second, time.perf_counter() - t0)
                record = {**self.call_record(second, r), "propensity": propensity}
            except Exception as e:  # noqa: BLE001 - a background call: its failure is logged and counted, not raised
                record = {"model": second, "reply": None, "error": f"{type(e).__name__}: {e}", "propensity": propensity}
            METRICS.observe_exploration(second, record.get("cost") or 0.0, "error" not in record)
            await asyncio.to_thread(self.traffic.append, {"kind": "explore", "request_id": request_id,
                                                          "calls": [record]})
            if judged:
                await self._grade(request_id, last_user_text(messages), [record])

        if judged is None:
            judged = self.traffic.judge_draw()
        self._background(call())

    def judge(self, request_id: str, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> bool:
        """With ``serving.traffic.judge`` (for a ``judge_share`` of requests), grade ``calls``' replies in the
        background and log a ``judge`` record; True when the request was drawn (its exploration reply, if
        any, is graded too)."""
        if self.traffic is None or self.pool is None or not self.traffic.judge_draw():
            return False
        self._background(self._grade(request_id, last_user_text(messages), calls))
        return True

    async def _grade(self, request_id: str, question: str, calls: list[dict[str, Any]]) -> None:
        assert self.traffic is not None and self.pool is not None
        judge = str(self.traffic.cfg.judge)
        grades = []
        for c in calls:
            if not c.get("reply"):
                continue
            try:
                r, _ = await asyncio.wait_for(self.pool.chat(judge, [{"role": "user", "content": judge_prompt(
                    question, c["reply"])}]), self.serving.proxy_timeout_s)
                g = {"model": c["model"], "judge": judge, "grade": parse_grade(r.text) if r.ok else None,
                     "reply": (r.text or "")[:200], "cost": r.cost, **({"error": r.error} if r.error else {})}
            except Exception as e:  # noqa: BLE001 - a background grade: its failure is logged, not raised
                g = {"model": c["model"], "judge": judge, "grade": None, "error": f"{type(e).__name__}: {e}"}
            METRICS.observe_judge(judge, g["grade"], g.get("cost") or 0.0)
            grades.append(g)
        if grades:
            await asyncio.to_thread(self.traffic.append, {"kind": "judge", "request_id": request_id,
                                                          "grades": grades})

    def observe_latency(self, model: str, total_s: float, ttft_s: float | None = None) -> None:
        """Report one answered call's latency to the selector (``rlrouter.selector.latency``), in the
        background: the reply does not wait for it."""
        self._background(self._observe_latency(model, total_s, ttft_s))

    async def _observe_latency(self, model: str, total_s: float, ttft_s: float | None = None) -> None:
        try:
            await self.selector.call("observe_latency", model=model, total_s=total_s, ttft_s=ttft_s)
        except Exception:  # noqa: BLE001 - a measurement: never fails a request
            pass

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._explorations.add(task)  # held until done: a task nobody holds may be collected mid-flight
        task.add_done_callback(self._explorations.discard)

    async def log_feedback(self, request_id: str, user: str, **what: Any) -> None:
        """Append a feedback to the traffic log (when on), fsynced before this returns."""
        if self.traffic is not None:
            rec = {"kind": "feedback", "request_id": request_id, "user": user,
                   **{k: v for k, v in what.items() if v is not None}}
            await asyncio.to_thread(self.traffic.append, rec)

    def encoder(self) -> Any:
        if self.encoder_ is None:
            from rlrouter.embeddings import TextEncoder

            self.encoder_ = TextEncoder(self.serving.encoder)
        return self.encoder_

    def check_query(self, text: str, field: str) -> None:
        """A prompt over ``serving.max_query_chars``: the answer to any prompt too long (errors.py's rule)."""
        cap = self.serving.max_query_chars
        if len(text) > cap:
            raise context_length_exceeded(field, f"this server accepts at most {cap} characters in a prompt "
                                                 f"(serving.max_query_chars)", f"{len(text)} characters")

    async def embedding(self, query: str) -> list[float] | None:
        """The query's embedding when the selector is contextual, else None."""
        if not self.cfg.use_contextual:
            return None
        vec = await asyncio.to_thread(self.encoder().encode_one, query)
        return [float(x) for x in vec]

    def candidates_for(self, requested: list[str] | None) -> list[str]:
        """The request's candidate restriction, checked against the pool."""
        if requested is None:
            return list(self.candidates)
        matched = [match_name(c, self.candidates) for c in requested]
        unknown = [c for c, m in zip(requested, matched) if m is None]
        if unknown:
            raise ApiError(422, f"field 'candidates': unknown candidate(s) {unknown}; known: {self.candidates}",
                           "candidates")
        return [m for m in matched if m is not None]

    async def answerable(self, query: str, models: list[str]) -> tuple[list[str], list[str]]:
        """``(can, missed)``: the ``models`` that can answer ``query`` and the replay candidates among them
        with no logged answer for it (a replay knows only its logged prompts; a live candidate answers
        anything). ``/route`` and the chat proxy's ``auto``/``arena`` both decide among ``can``."""
        if self.pool is None:
            return list(models), []
        replays = [m for m in models if hasattr(self.pool.backend(m), "lookup")]
        if not replays:
            return list(models), []
        # the first fuzzy lookup builds an index (about 1.5 s on RouteLLM's table): not on the event loop
        rows = await asyncio.to_thread(lambda: [self.pool.backend(m).lookup(query) for m in replays])
        missed = {m for m, row in zip(replays, rows) if row is None}
        return [m for m in models if m not in missed], sorted(missed)
