"""Ray Serve application: the selector deployment (one actor holding the state), its HTTP ingress.

Thin wiring only; the logic is in ``rlrouter.selector`` (the bandit) and ``rlrouter.serving`` (the
API). Import path ``serve.app:app`` (defaults) or ``serve.app:build_app`` with args (serve/config.yaml).

- ``SelectorDeployment``: exactly one replica (:class:`SelectorReplica`); its single
  :class:`~rlrouter.selector.Selector`, held by a :class:`~rlrouter.serving.selector_host.SelectorHost`,
  holds every posterior, so decisions and updates never race. It loads the snapshot + write-ahead log
  at start (a corrupt or foreign file fails the start with a clear error, after being moved aside),
  saves every ``auto_save_interval`` from a background thread, and saves once more on shutdown.
- ``serving.selector_in_ingress: true`` (default): that replica is also the HTTP ingress (FastAPI,
  ``rlrouter.serving.api.create_app``), so ``/route`` costs no actor hop (latency). ``false``:
  a separate ``Ingress`` deployment calls it through its handle; its replicas may scale out and hold
  no learned state. Either way the ingress proxies chat completions through the candidate pool, and
  the trained routers (below) are their own deployments, reached by handles only when configured.
- Served routers: optional. ``routers: {name: {path, state}}`` names router folders written by
  jobs/train_router.py; one ``ServedRoutersDeployment`` holds them all, and a request's ``model:
  "router-<name>-<threshold>"`` picks one (``rlrouter.serving.router_models``).
- Router-R1 policy: optional. ``router_r1.import_path`` names a deployment class with an async
  ``route(query) -> {selected_model, thinking, full_response}``; it is bound and passed to the ingress,
  which then answers ``/router_r1/route`` with it. Without one the selector answers, and says so.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import yaml
from ray import serve
from ray.serve.handle import DeploymentHandle

from rlrouter.pool import read_pool_config
from rlrouter.selector import Selector, SelectorConfig
from rlrouter.serving.api import create_app, install
from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.router_r1_client import RouterR1Answer
from rlrouter.serving.selector_host import SelectorHost
from rlrouter.serving.selector_client import unwrap
from rlrouter.serving.service import RouterService

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "conf" / "selector" / "rl_driven.yaml"
# the logged replays plus SmolLM2 on a local vLLM engine: prompts nobody logged get a real answer
DEFAULT_POOL = ROOT / "conf" / "pool" / "replay_plus_smollm2.yaml"


def _candidate_costs(pool_cfg: dict[str, Any]) -> dict[str, float]:
    """Price per candidate for cost awareness: mean of input and output USD per 1M tokens."""
    return {c["name"]: (float(c.get("price_in", 0.0)) + float(c.get("price_out", 0.0))) / 2
            for c in pool_cfg.get("candidates", [])}


def _metrics() -> Any:
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


def _ingress_ports() -> Any:
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


def _install_service(selector: Any, config: dict[str, Any], router_r1: DeploymentHandle | None,
                     gmt: DeploymentHandle | None, intent: DeploymentHandle | None,
                     routers: DeploymentHandle | None = None) -> None:
    """Build this process's RouterService around ``selector`` (a SelectorClient) and serve it over HTTP.

    The API keys arrive as ``config["api_key_digests"]``: read once where the app was built."""
    from serve.routers import HandleGMT, HandleIntent, HandleServedRouters

    from rlrouter.serving.served_routers import read_manifests

    from rlrouter.pool.pool import CandidatePool

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pool_cfg = config["pool"]
    pool = CandidatePool.from_config(pool_cfg)
    selector_cfg = SelectorConfig.from_dict(config.get("selector"))
    serving = ServingConfig.from_dict(config.get("serving"))
    policy = None
    if router_r1 is not None:
        policy = HandleRouterR1Policy(router_r1, str(config.get("router_r1", {}).get("name", "router-r1")))
    # GMTRouter scores the logged model names; the pool's replay candidates say which is which
    name_map = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in pool_cfg["candidates"]}
    service = RouterService(selector, selector_cfg, serving, pool.names, pool=pool, router_r1_policy=policy,
                            gmt=HandleGMT(gmt) if gmt is not None else None,
                            intent=HandleIntent(intent) if intent is not None else None, name_map=name_map,
                            ingress_ports=_ingress_ports(),
                            served_routers=HandleServedRouters(routers) if routers is not None else None,
                            router_manifests=read_manifests(config.get("routers") or {}) if routers is not None
                            else None)
    install(service, ApiKeyAuth.from_digests(config["api_key_digests"]))


class SelectorReplica:
    """The one replica holding the selector. With ``app_config`` it also answers HTTP (the app's ingress,
    ``serving.selector_in_ingress``); without, a separate ``Ingress`` calls ``call`` through its handle."""

    def __init__(self, selector_cfg: dict[str, Any], candidates: list[str], app_config: dict[str, Any] | None = None,
                 router_r1: DeploymentHandle | None = None, gmt: DeploymentHandle | None = None,
                 intent: DeploymentHandle | None = None, routers: DeploymentHandle | None = None,
                 budgets: dict[str, Any] | None = None):
        from rlrouter.serving.budgets import BudgetConfig

        self.host = SelectorHost(Selector(SelectorConfig.from_dict(selector_cfg), candidates), on_result=_metrics(),
                                 budgets=BudgetConfig.from_dict(budgets) if budgets else None)
        if app_config is not None:
            _install_service(self.host, app_config, router_r1, gmt, intent, routers)

    async def call(self, method: str, kwargs: dict[str, Any]) -> tuple:
        return await self.host.run(method, kwargs)

    def bench(self, n: int, candidates: list[str]) -> float:
        """Decisions per second of ``n`` decisions made inside this actor (benchmarks/bench_selector.py)."""
        import time

        from rlrouter.selector import SelectionRequest

        req = SelectionRequest(candidates=candidates)
        t0 = time.perf_counter()
        for _ in range(n):
            self.host.selector.select(req)
        return n / (time.perf_counter() - t0)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Runtime knobs (exploration, blends, weights); the storage path cannot change at run time."""
        self.host.reconfigure(user_config)

    def __del__(self) -> None:
        host = getattr(self, "host", None)
        if host is not None:  # None: never initialised (e.g. the class object itself)
            host.close()


# Both carry the deployment name SelectorDeployment: whichever is deployed is the one actor with the state.
# exactly one replica: its single Selector holds every posterior, so decisions and updates never race
_SELECTOR_OPTIONS = {"name": "SelectorDeployment", "num_replicas": 1, "max_ongoing_requests": 2048,
                     "ray_actor_options": {"num_cpus": 0}}
SelectorDeployment = serve.deployment(**_SELECTOR_OPTIONS)(SelectorReplica)
SelectorIngress = serve.deployment(**_SELECTOR_OPTIONS)(serve.ingress(create_app)(SelectorReplica))


@serve.deployment(num_replicas=1, max_ongoing_requests=512)
@serve.ingress(create_app)
class Ingress:
    """Stateless HTTP ingress (``serving.selector_in_ingress: false``): may scale out."""

    def __init__(self, selector: DeploymentHandle, config: dict[str, Any],
                 router_r1: DeploymentHandle | None = None, gmt: DeploymentHandle | None = None,
                 intent: DeploymentHandle | None = None, routers: DeploymentHandle | None = None):
        _install_service(HandleSelectorClient(selector), config, router_r1, gmt, intent, routers)


def load_config(args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compose {selector, serving, pool, router_r1} from the YAML files named in ``args`` plus overrides."""
    args = dict(args or {})
    path = Path(args.pop("config", DEFAULT_CONFIG))
    if not path.is_absolute():
        path = ROOT / path
    cfg = yaml.safe_load(DEFAULT_CONFIG.read_text()) or {}
    if path.resolve() != DEFAULT_CONFIG.resolve():
        # a variant file sets only what differs from rl_driven.yaml
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            if key == "selector" and isinstance(value, dict):  # VSR's algorithm/decisions shape, as printed
                value = SelectorConfig.flat_fields(value)
            cfg[key] = {**(cfg.get(key) or {}), **value} if isinstance(value, dict) else value
    cfg["pool"] = read_pool_config(args.pop("pool", cfg.pop("pool", None)) or DEFAULT_POOL, ROOT)
    if "routers" in args:  # {name: folder} or {name: {path, state}}: routers saved by jobs/train_router.py
        cfg["routers"] = {**(cfg.get("routers") or {}), **(args.pop("routers") or {})}
    for key in ("selector", "serving", "router_r1", "gmtrouter", "intent"):
        if key in args:
            value = args.pop(key) or {}
            if key == "selector":
                value = SelectorConfig.flat_fields(value)
            cfg[key] = {**(cfg.get(key) or {}), **value}
    if "dev" in args:  # `serve run serve.app:build_app dev=true` passes text
        dev = args.pop("dev")
        cfg["serving"] = {**(cfg.get("serving") or {}), "dev": dev is True or str(dev).lower() in ("1", "true")}
    extra = args.pop("add_candidates", None) or []
    if extra:  # e.g. OpenAI-compatible upstreams, keys from the environment (options.api_key_env)
        cfg["pool"] = {**cfg["pool"], "candidates": [*cfg["pool"]["candidates"], *extra]}
    if args:
        raise ValueError(f"unknown app args {sorted(args)}; expected config, pool, add_candidates, selector, "
                         f"serving, router_r1, gmtrouter, intent, routers, dev")
    sel = dict(cfg.get("selector") or {})
    sel.setdefault("costs", _candidate_costs(cfg["pool"]))
    if sel.get("storage_path") and not Path(sel["storage_path"]).is_absolute():
        sel["storage_path"] = str(ROOT / sel["storage_path"])
    budgets = (cfg.get("serving") or {}).get("budgets")
    if isinstance(budgets, dict) and budgets.get("limits"):
        path = budgets.get("path") or "outputs/budgets/spend.log"
        cfg["serving"] = {**cfg["serving"], "budgets": {
            **budgets, "path": path if Path(path).is_absolute() else str(ROOT / path)}}
    from rlrouter.serving.traffic import selector_defaults

    cfg["selector"] = selector_defaults(sel, cfg.get("serving"))  # propensities for the traffic log
    from rlrouter.serving.served_routers import router_entries

    cfg["routers"] = router_entries(cfg.get("routers"), ROOT)
    return cfg


def build_app(args: dict[str, Any] | None = None) -> serve.Application:
    """Serve application builder (``serve run serve.app:build_app config=...``)."""
    cfg = load_config(args)
    sel_cfg = SelectorConfig.from_dict(cfg["selector"])  # fail here, naming the field, not inside a replica
    serving = ServingConfig.from_dict(cfg.get("serving"))
    keys = serving.startup_keys()  # none, or a placeholder without dev: refused here, saying why
    cfg["api_key_digests"] = ApiKeyAuth(keys).digests()  # replicas get digests, never the keys
    cfg["serving"] = ServingConfig.without_secrets(cfg.get("serving"))  # Serve logs deployment arguments
    print(f"rlrouter serve: {len(keys)} API key(s) for user(s) {sorted({k.user_id for k in keys})} "
          f"(serving.api_keys + ${serving.api_keys_env}{' + ' + serving.api_keys_file if serving.api_keys_file else ''})"
          f"{' [dev: placeholder keys allowed]' if serving.dev else ''}",
          flush=True)
    names = [c["name"] for c in cfg["pool"]["candidates"]]
    r1 = cfg.get("router_r1") or {}
    policy = None
    if r1.get("import_path"):
        mod, _, attr = r1["import_path"].partition(":")
        policy = getattr(importlib.import_module(mod), attr).bind(**(r1.get("args") or {}))
    elif sel_cfg.router_model_path:  # VSR's router_model_path: serve that checkpoint as the policy
        from serve.router_r1 import RouterR1Deployment

        policy = RouterR1Deployment.bind(**{"pool": cfg["pool"]["candidates"], **(r1.get("args") or {}),
                                            "checkpoint": sel_cfg.router_model_path})
    from serve.routers import GMTRouterDeployment, IntentDeployment

    gmt_ck = (cfg.get("gmtrouter") or {}).get("checkpoint")
    intent_ck = (cfg.get("intent") or {}).get("checkpoint")
    gmt = GMTRouterDeployment.bind(gmt_ck) if gmt_ck else None
    intent = IntentDeployment.bind(intent_ck) if intent_ck else None
    routers = None
    if cfg["routers"]:
        from serve.routers import ServedRoutersDeployment

        from rlrouter.serving.router_models import candidate_map
        from rlrouter.serving.served_routers import read_manifests

        # fail here, naming routers.<name>, not inside a replica: folders readable, candidates in the pool
        pool_names = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in cfg["pool"]["candidates"]}
        candidate_map(read_manifests(cfg["routers"]), names, pool_names)
        from dataclasses import asdict

        routers = ServedRoutersDeployment.bind(cfg["routers"], asdict(serving.release), serving.release_journal)
    budgets = serving.budgets.to_dict() if serving.budgets.enabled else None  # kept by the selector's replica
    if serving.selector_in_ingress:
        return SelectorIngress.bind(cfg["selector"], names, cfg, policy, gmt, intent, routers, budgets=budgets)
    return Ingress.bind(SelectorDeployment.bind(cfg["selector"], names, budgets=budgets), cfg, policy, gmt, intent,
                        routers)



def __getattr__(name: str) -> Any:
    """``serve.app:app``, the app with the default args, built when asked for (not at import: building
    reads the API keys and refuses to start without them)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)
