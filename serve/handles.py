"""The service's clients of the app's deployments, through their handles, and the wiring of one process's
``RouterService`` (thin Serve glue; the logic is in ``rlrouter.serving``)."""

from __future__ import annotations

import os
from typing import Any

from ray.serve.handle import DeploymentHandle

from rlrouter.serving.app_config import AppConfig, AppParts
from rlrouter.serving.router_r1_client import RouterR1Answer
from rlrouter.serving.selector_client import unwrap


def selector_metrics() -> Any:
    """``on_result`` of the selector host: decision and feedback counters on the app's ``GET /metrics`` and
    on the Ray dashboard / metrics endpoint (docs/metrics.md)."""
    from ray.util.metrics import Counter

    from rlrouter.serving.metrics import METRICS

    decisions = Counter("rlrouter_selector_decisions", description="selector decisions", tag_keys=("model", "mode"))
    feedback = Counter("rlrouter_selector_feedback", description="acknowledged feedback updates",
                       tag_keys=("model", "kind"))

    def count(method: str, r: tuple) -> None:
        try:
            METRICS.observe_selector(method, r)
            if r[0] != "ok":
                return
            if method in ("select", "select_top_k", "select_all", "register"):
                decisions.inc(1, tags={"model": str(r[1]["model"]), "mode": str(r[1]["mode"])})
            elif method == "feedback":
                for d in r[1]["deltas"]:
                    feedback.inc(1, tags={"model": str(d["model"]), "kind": str(r[1]["kind"])})
        except Exception:  # noqa: BLE001 - metrics never fail a decision
            pass

    return count


class HandleSelectorClient:
    """The service's selector client: calls the selector actor through its deployment handle."""

    def __init__(self, handle: DeploymentHandle):
        self.handle = handle

    async def call(self, method: str, **kwargs: Any) -> Any:
        return unwrap(await self.handle.call.remote(method, kwargs))


class HandleRouterR1Policy:
    """A Router-R1 policy deployment seen through its handle."""

    def __init__(self, handle: DeploymentHandle, name: str):
        self.handle = handle
        self.name = name

    async def route(self, query: str) -> RouterR1Answer:
        d = await self.handle.route.remote(query)
        return RouterR1Answer(d["selected_model"], d.get("thinking", ""), d.get("full_response", ""))


class HandleGMT:
    """The service's GMTRouter client (KeyError for an unknown user, as the service expects)."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def score(self, user_id: str, query: str) -> dict[str, float]:
        out = await self.handle.score.remote(user_id, query)
        if "unknown_user" in out:
            raise KeyError(user_id)
        return out["scores"]


class HandleIntent:
    def __init__(self, handle: Any):
        self.handle = handle

    async def classify(self, texts: list[str]) -> list[tuple[str, float]]:
        return await self.handle.classify.remote(texts)


class HandleServedRouters:
    """The service's served-routers client, through the deployment's handle."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def decide(self, name: str, query: str, **kwargs: Any) -> dict[str, Any]:
        return await self.handle.decide.remote(name, query, **kwargs)

    async def feedback(self, name: str, request_id: str, **kwargs: Any) -> dict[str, Any]:
        return await self.handle.feedback.remote(name, request_id, **kwargs)

    async def release(self, name: str, action: str, args: dict[str, Any]) -> dict[str, Any]:
        return await self.handle.release.remote(name, action, args)

    async def status(self) -> dict[str, Any]:
        return await self.handle.status.remote()


def ingress_ports() -> Any:
    """``/health``'s lookup of this app's direct-ingress HTTP ports (they move when a replica is replaced)."""
    import asyncio

    from ray import serve as ray_serve

    from rlrouter.distributed.cluster import direct_ingress_port

    cache: dict[str, list[int]] = {}

    async def ports() -> list[int]:
        if os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") != "1":
            return []  # direct ingress off (a cluster-wide flag): the proxy's port is the only one
        if "ports" not in cache:  # a replica keeps its port: found once, kept
            app = ray_serve.get_replica_context().app_name
            http = ray_serve.context._get_global_client().http_config.port
            try:
                cache["ports"] = [await asyncio.to_thread(direct_ingress_port, app, http, 2.0)]
            except TimeoutError:
                return []  # not listed by the controller yet: ask again next time
        return cache["ports"]

    return ports


def install_service(selector: Any, cfg: AppConfig, parts: AppParts) -> None:
    """Build this process's RouterService around ``selector`` (a SelectorClient) and the handles in ``parts``,
    and serve it over HTTP (``rlrouter.serving.api``)."""
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.serving.api import install
    from rlrouter.serving.auth import ApiKeyAuth
    from rlrouter.serving.served_routers import read_manifests
    from rlrouter.serving.service import RouterService

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pool = CandidatePool.from_config(cfg.pool)
    service = RouterService(
        selector, cfg.selector_config, cfg.serving_config, pool.names, pool=pool,
        router_r1_policy=HandleRouterR1Policy(parts.router_r1, parts.router_r1_name) if parts.router_r1 else None,
        gmt=HandleGMT(parts.gmt) if parts.gmt else None, intent=HandleIntent(parts.intent) if parts.intent else None,
        name_map=cfg.name_map, ingress_ports=ingress_ports(),
        served_routers=HandleServedRouters(parts.routers) if parts.routers else None,
        router_manifests=read_manifests(cfg.routers) if parts.routers else None)
    install(service, ApiKeyAuth.from_digests(list(cfg.api_key_digests)))
