"""The app's own Prometheus metrics, served as text by ``GET /metrics`` (docs/metrics.md, "Serve app").

Ray exports metrics on a node's metrics port, which ``serve run`` picks at random; this endpoint sits on
the app's own address. One registry per process: a replica answers for the requests and decisions it
saw, and counts from zero when it starts. Routes are labelled by their path template (``/v1/models``),
and any path the API does not have by ``unmatched``, so a scan of random paths cannot grow the label set.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# up to 120 s: the proxy's deadline on one chat completion (ServingConfig.proxy_timeout_s)
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
DECISION_METHODS = ("select", "select_top_k", "select_all", "register")


class ServingMetrics:
    """Request counters, a latency histogram and the selector's decision / feedback counters."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("rlrouter_http_requests", "HTTP requests answered, by route template, method "
                                "and status", ("route", "method", "status"), registry=r)
        self.latency = Histogram("rlrouter_http_request_duration_seconds", "seconds from the request to the "
                                 "last byte of the answer (a stream: to its end)", ("route",),
                                 buckets=LATENCY_BUCKETS_S, registry=r)
        self.in_flight = Gauge("rlrouter_http_requests_in_flight", "HTTP requests being answered now", registry=r)
        self.decisions = Counter("rlrouter_selector_decisions", "selector decisions, by chosen candidate and mode",
                                 ("model", "mode"), registry=r)
        self.feedback = Counter("rlrouter_selector_feedback", "acknowledged feedback updates, one per candidate "
                                "an update touched", ("model", "kind"), registry=r)
        self.explore_calls = Counter("rlrouter_traffic_explore_calls", "background calls of a second candidate "
                                     "(serving.traffic.explore_share), by candidate and outcome", ("model", "ok"),
                                     registry=r)
        self.explore_cost = Counter("rlrouter_traffic_explore_cost_usd", "what those calls cost, USD", ("model",),
                                    registry=r)
        self.judge_calls = Counter("rlrouter_traffic_judge_calls", "the judge's grades of routed replies "
                                   "(serving.traffic.judge), by judge and grade (yes, no, none: unreadable or failed)",
                                   ("judge", "grade"), registry=r)
        self.judge_cost = Counter("rlrouter_traffic_judge_cost_usd", "what the judge's calls cost, USD", ("judge",),
                                  registry=r)
        self.router_decisions = Counter("rlrouter_router_decisions", "decisions of a served router, by router and "
                                        "the version that made it", ("router", "version"), registry=r)
        self.release_events = Counter("rlrouter_router_release_events", "releases of a served router's new "
                                      "version: loaded, promoted, rolled_back", ("router", "event"), registry=r)
        self.release_reward = Gauge("rlrouter_router_release_mean_reward", "mean reward of each version in the "
                                    "release in progress (or just ended), from live feedback", ("router", "version"),
                                    registry=r)

        self.affinity_turns = Counter("rlrouter_session_affinity_turns", "routed turns of sessions under session "
                                      "affinity, by outcome: new (pinned), kept, held (the pin overrode the "
                                      "decision), moved", ("outcome",), registry=r)
        self.affinity_moves = Counter("rlrouter_session_affinity_moves", "sessions moved to another candidate, by "
                                      "reason (unavailable, error, margin); moves per session = this / "
                                      "turns{outcome=\"new\"}", ("reason",), registry=r)

        self.expected_latency = Gauge("rlrouter_candidate_expected_latency_seconds", "each candidate's measured "
                                      "latency, a decaying mean over its calls (selector.latency_half_life): ttft "
                                      "(to the first token) and total", ("model", "kind"), registry=r)

        self.budget_spent = Gauge("rlrouter_budget_spent_usd", "USD charged to each account of a budget "
                                  "(serving.budgets) in its current period", ("budget", "tenant"), registry=r)
        self.budget_refusals = Counter("rlrouter_budget_refusals", "requests answered 429 because a budget could "
                                       "not pay for them", ("budget",), registry=r)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_selector(self, method: str, result: tuple) -> None:
        """A :class:`~rlrouter.serving.selector_host.SelectorHost` result: ``("ok", payload)`` or an error."""
        if result[0] != "ok":
            return
        if method in DECISION_METHODS:
            self.decisions.labels(str(result[1]["model"]), str(result[1]["mode"])).inc()
        elif method == "observe_latency":
            e = result[1]
            if e.get("calls"):
                self.expected_latency.labels(str(e["model"]), "ttft").set(e["ttft_ms"] / 1e3)
                self.expected_latency.labels(str(e["model"]), "total").set(e["total_ms"] / 1e3)
        elif method == "budget_charge":
            for a in result[1]:
                self.budget_spent.labels(str(a["budget"]), str(a["tenant"])).set(float(a["spent_usd"]))
        elif method == "stick":
            self.affinity_turns.labels(str(result[1]["outcome"])).inc()
            if result[1]["outcome"] == "moved":
                self.affinity_moves.labels(str(result[1]["reason"])).inc()
        elif method == "feedback":
            for d in result[1]["deltas"]:
                self.feedback.labels(str(d["model"]), str(result[1]["kind"])).inc()

    def observe_exploration(self, model: str, cost: float, ok: bool) -> None:
        self.explore_calls.labels(model, str(ok).lower()).inc()
        self.explore_cost.labels(model).inc(max(0.0, float(cost)))

    def observe_judge(self, judge: str, grade: float | None, cost: float) -> None:
        self.judge_calls.labels(judge, {1.0: "yes", 0.0: "no"}.get(grade, "none") if grade is not None else "none").inc()
        self.judge_cost.labels(judge).inc(max(0.0, float(cost)))

    def observe_router_decision(self, router: str, version: str) -> None:
        self.router_decisions.labels(router, version).inc()

    def observe_release_event(self, event: dict[str, Any]) -> None:
        self.release_events.labels(str(event["router"]), str(event["event"])).inc()

    def observe_release_reward(self, router: str, version: str, mean: float | None) -> None:
        if mean is not None:
            self.release_reward.labels(router, version).set(float(mean))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric above."""
        return generate_latest(self.registry)


METRICS = ServingMetrics()
"""This process's metrics: what ``GET /metrics`` of the app it serves returns."""


class RequestMetrics:
    """Pure ASGI middleware: counts every HTTP request by route template and status, and times it to the
    end of its answer (a streamed answer included)."""

    def __init__(self, app: Any, metrics: ServingMetrics = METRICS):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500  # what the client gets if the app fails before it starts an answer

        async def counting_send(msg: dict) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.in_flight.dec()
            # the router put the matched route into this same scope
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe_request(route, scope["method"], status, time.perf_counter() - t0)
