"""Ray Serve application: the selector deployment (one actor holding the state), its HTTP ingress.

Thin wiring only; the logic is in ``rlrouter.selector`` (the bandit) and ``rlrouter.serving`` (the
API); the config is one typed ``AppConfig`` built here, on the driver, and the optional deployments travel to the
ingress as one ``AppParts`` (``rlrouter.serving.app_config``). Import path ``serve.app:app`` (defaults) or
``serve.app:build_app`` with args (serve/config.yaml).

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
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from rlrouter.selector import Selector
from rlrouter.serving.api import create_app
from rlrouter.serving.app_config import AppConfig, AppParts
from rlrouter.serving.selector_host import SelectorHost
from serve.handles import HandleSelectorClient, install_service, selector_metrics
from serve.routers import GMTRouterDeployment, IntentDeployment, ServedRoutersDeployment


class SelectorReplica:
    """The one replica holding the selector. With ``parts`` it also answers HTTP (the app's ingress,
    ``serving.selector_in_ingress``); without, a separate ``Ingress`` calls ``call`` through its handle."""

    def __init__(self, cfg: AppConfig, parts: AppParts | None = None):
        from rlrouter.serving.budgets import BudgetConfig

        self.host = SelectorHost(Selector(cfg.selector_config, cfg.candidates), on_result=selector_metrics(),
                                 budgets=BudgetConfig.from_dict(cfg.budgets) if cfg.budgets else None)
        if parts is not None:
            install_service(self.host, cfg, parts)

    async def call(self, method: str, kwargs: dict[str, Any]) -> tuple:
        return await self.host.run(method, kwargs)

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

    def __init__(self, selector: DeploymentHandle, cfg: AppConfig, parts: AppParts):
        install_service(HandleSelectorClient(selector), cfg, parts)


def router_r1_policy(cfg: AppConfig) -> Any:
    """The Router-R1 policy deployment the config names (``router_r1.import_path``, or VSR's
    ``router_model_path`` served by ``serve.router_r1``), bound; None without one."""
    if cfg.router_r1.get("import_path"):
        mod, _, attr = cfg.router_r1["import_path"].partition(":")
        return getattr(importlib.import_module(mod), attr).bind(**(cfg.router_r1.get("args") or {}))
    if cfg.selector_config.router_model_path:
        from serve.router_r1 import RouterR1Deployment

        return RouterR1Deployment.bind(**{"pool": cfg.pool["candidates"], **(cfg.router_r1.get("args") or {}),
                                          "checkpoint": cfg.selector_config.router_model_path})
    return None


def build_app(args: dict[str, Any] | None = None) -> serve.Application:
    """Serve application builder (``serve run serve.app:build_app config=...``)."""
    cfg, keys = AppConfig.load(args).with_keys()  # a bad field or a missing key fails here, saying why
    serving = cfg.serving_config
    print(f"rlrouter serve: {len(keys)} API key(s) for user(s) {sorted({k.user_id for k in keys})} "
          f"(serving.api_keys + ${serving.api_keys_env}{' + ' + serving.api_keys_file if serving.api_keys_file else ''})"
          f"{' [dev: placeholder keys allowed]' if serving.dev else ''}", flush=True)
    gmt, intent = cfg.gmtrouter.get("checkpoint"), cfg.intent.get("checkpoint")
    from dataclasses import asdict

    parts = AppParts(
        router_r1=router_r1_policy(cfg), router_r1_name=str(cfg.router_r1.get("name", "router-r1")),
        gmt=GMTRouterDeployment.bind(gmt) if gmt else None, intent=IntentDeployment.bind(intent) if intent else None,
        routers=ServedRoutersDeployment.bind(cfg.routers, asdict(serving.release), serving.release_journal)
        if cfg.routers else None)
    if serving.selector_in_ingress:
        return SelectorIngress.bind(cfg, parts)
    return Ingress.bind(SelectorDeployment.bind(cfg), cfg, parts)


def __getattr__(name: str) -> Any:
    """``serve.app:app``, the app with the default args, built when asked for (not at import: building
    reads the API keys and refuses to start without them)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)
