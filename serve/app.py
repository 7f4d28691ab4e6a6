"""Ray Serve application: the selector deployment (one actor holding the state) and the HTTP ingress.

Thin wiring only; the logic is in ``rlrouter.selector`` (the bandit) and ``rlrouter.serving`` (the
API). Import path ``serve.app:app`` (defaults) or ``serve.app:build_app`` with args (serve/config.yaml).

- ``SelectorDeployment``: exactly one replica; its single :class:`~rlrouter.selector.Selector` holds
  every posterior, so decisions and updates never race. It loads the snapshot + write-ahead log at
  start (a corrupt or foreign file fails the start with a clear error, after being moved aside), saves
  every ``auto_save_interval`` from a background thread, and saves once more on shutdown.
- ``Ingress``: FastAPI (``rlrouter.serving.api.create_app``) around a ``RouterService`` that calls the
  selector through its handle and proxies chat completions through the candidate pool. Replicas may
  scale out; they hold no learned state.
- Router-R1 policy: optional. ``router_r1.import_path`` names a deployment class with an async
  ``route(query) -> {selected_model, thinking, full_response}``; it is bound and passed to the ingress,
  which then answers ``/router_r1/route`` with it. Without one the selector answers, and says so.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
from pathlib import Path
from typing import Any

import yaml
from ray import serve
from ray.serve.handle import DeploymentHandle

from rlrouter.selector import Selector, SelectorConfig
from rlrouter.serving.api import create_app, install
from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.router_r1_client import RouterR1Answer
from rlrouter.serving.service import RouterService, run_selector_call, unwrap

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "conf" / "selector" / "rl_driven.yaml"
DEFAULT_POOL = ROOT / "conf" / "pool" / "routellm_replay.yaml"


def _candidate_costs(pool_cfg: dict[str, Any]) -> dict[str, float]:
    """Price per candidate for cost awareness: mean of input and output USD per 1M tokens."""
    return {c["name"]: (float(c.get("price_in", 0.0)) + float(c.get("price_out", 0.0))) / 2
            for c in pool_cfg.get("candidates", [])}


@serve.deployment(num_replicas=1, max_ongoing_requests=2048, ray_actor_options={"num_cpus": 0})
class SelectorDeployment:
    def __init__(self, selector_cfg: dict[str, Any], candidates: list[str]):
        from ray.util.metrics import Counter

        self.selector = Selector(SelectorConfig.from_dict(selector_cfg), candidates)
        self.selector.load()
        # shown on the Ray dashboard / metrics endpoint (docs/metrics.md)
        self._decisions = Counter("rlrouter_selector_decisions", description="selector decisions",
                                  tag_keys=("model", "mode"))
        self._feedback = Counter("rlrouter_selector_feedback", description="acknowledged feedback updates",
                                 tag_keys=("model", "kind"))
        self._stop = threading.Event()
        self._saver = threading.Thread(target=self._autosave, name="selector-autosave", daemon=True)
        self._saver.start()

    def _autosave(self) -> None:
        period = max(0.05, min(1.0, self.selector.config.auto_save_interval / 4 or 1.0))
        while not self._stop.wait(period):
            try:
                self.selector.maybe_save()
            except OSError:
                pass  # retried next period; feedback stays durable through the write-ahead log

    async def call(self, method: str, kwargs: dict[str, Any]) -> tuple:
        if method == "feedback":
            # the write-ahead-log fsync runs off the event loop; the selector's lock orders updates
            r = await asyncio.to_thread(run_selector_call, self.selector, method, kwargs)
        else:
            r = run_selector_call(self.selector, method, kwargs)
        self._count(method, r)
        return r

    def _count(self, method: str, r: tuple) -> None:
        try:
            if r[0] != "ok":
                return
            if method in ("select", "select_top_k", "select_all", "register"):
                self._decisions.inc(1, tags={"model": str(r[1]["model"]), "mode": str(r[1]["mode"])})
            elif method == "feedback":
                for d in r[1]["deltas"]:
                    self._feedback.inc(1, tags={"model": str(d["model"]), "kind": str(r[1]["kind"])})
        except Exception:  # noqa: BLE001 - metrics never fail a decision
            pass

    def bench(self, n: int, candidates: list[str]) -> float:
        """Decisions per second of ``n`` decisions made inside this actor (benchmarks/bench_selector.py)."""
        import time

        from rlrouter.selector import SelectionRequest

        req = SelectionRequest(candidates=candidates)
        t0 = time.perf_counter()
        for _ in range(n):
            self.selector.select(req)
        return n / (time.perf_counter() - t0)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Runtime knobs (exploration, blends, weights); the storage path cannot change at run time."""
        cfg = self.selector.config.to_dict()
        for k in ("storage_path",):
            if k in user_config and user_config[k] != cfg[k]:
                raise ValueError(f"user_config.{k}: cannot change while running")
        cfg.update(user_config or {})
        self.selector.config = SelectorConfig.from_dict(cfg)

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is None:  # never initialised (e.g. the class object itself)
            return
        stop.set()
        try:
            self.selector.close()
        except Exception:  # noqa: BLE001 - best effort at shutdown; the log already holds every ack
            pass


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


@serve.deployment(num_replicas=1, max_ongoing_requests=512)
@serve.ingress(create_app)
class Ingress:
    def __init__(self, selector: DeploymentHandle, config: dict[str, Any],
                 router_r1: DeploymentHandle | None = None, gmt: DeploymentHandle | None = None,
                 intent: DeploymentHandle | None = None):
        from serve.routers import HandleGMT, HandleIntent

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
        self.service = RouterService(HandleSelectorClient(selector), selector_cfg, serving, pool.names, pool=pool,
                                     router_r1_policy=policy, gmt=HandleGMT(gmt) if gmt is not None else None,
                                     intent=HandleIntent(intent) if intent is not None else None,
                                     name_map=name_map)
        install(self.service, ApiKeyAuth(serving.keys()))


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
            cfg[key] = {**(cfg.get(key) or {}), **value} if isinstance(value, dict) else value
    pool_src = args.pop("pool", cfg.pop("pool", None)) or str(DEFAULT_POOL)
    if isinstance(pool_src, str):
        p = Path(pool_src)
        pool_src = yaml.safe_load((p if p.is_absolute() else ROOT / p).read_text())
    cfg["pool"] = pool_src
    for key in ("selector", "serving", "router_r1", "gmtrouter", "intent"):
        if key in args:
            cfg[key] = {**(cfg.get(key) or {}), **(args.pop(key) or {})}
    if args:
        raise ValueError(f"unknown app args {sorted(args)}; expected config, pool, selector, serving, router_r1, "
                         f"gmtrouter, intent")
    sel = dict(cfg.get("selector") or {})
    sel.setdefault("costs", _candidate_costs(cfg["pool"]))
    if sel.get("storage_path") and not Path(sel["storage_path"]).is_absolute():
        sel["storage_path"] = str(ROOT / sel["storage_path"])
    cfg["selector"] = sel
    return cfg


def build_app(args: dict[str, Any] | None = None) -> serve.Application:
    """Serve application builder (``serve run serve.app:build_app config=...``)."""
    cfg = load_config(args)
    SelectorConfig.from_dict(cfg["selector"])  # fail here, naming the field, not inside a replica
    ServingConfig.from_dict(cfg.get("serving"))
    names = [c["name"] for c in cfg["pool"]["candidates"]]
    selector = SelectorDeployment.bind(cfg["selector"], names)
    r1 = cfg.get("router_r1") or {}
    policy = None
    if r1.get("import_path"):
        mod, _, attr = r1["import_path"].partition(":")
        policy = getattr(importlib.import_module(mod), attr).bind(**(r1.get("args") or {}))
    from serve.routers import GMTRouterDeployment, IntentDeployment

    gmt_ck = (cfg.get("gmtrouter") or {}).get("checkpoint")
    intent_ck = (cfg.get("intent") or {}).get("checkpoint")
    gmt = GMTRouterDeployment.bind(gmt_ck) if gmt_ck else None
    intent = IntentDeployment.bind(intent_ck) if intent_ck else None
    return Ingress.bind(selector, cfg, policy, gmt, intent)


app = build_app()
