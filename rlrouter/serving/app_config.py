"""The Serve app's configuration, typed once where the app is built, and the optional parts it runs with.

``AppConfig.load(args)`` composes what ``serve/app.py:build_app`` is given: ``conf/selector/rl_driven.yaml`` (a
variant file named by ``config`` sets only what differs, in either our flat shape or VSR's
``algorithm``/``decisions`` shape), the pool file, the served routers, and the overrides in ``args``. Every bad
field fails here, on the driver, naming its place, not inside a replica. ``with_keys()`` then reads the API keys
from the config and the environment and keeps only their digests: replicas get the whole ``AppConfig`` and never
a key (Serve logs deployment arguments).

``AppParts`` carries the optional deployments the ingress talks to (the Router-R1 policy, GMTRouter, the intent
classifier, the served routers) as one object: at build time each is a bound deployment or None, inside a replica
Serve hands over its handle in the same place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlrouter.pool import read_pool_config
from rlrouter.selector import SelectorConfig
from rlrouter.serving.config import ServingConfig

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "conf" / "selector" / "rl_driven.yaml"
DEFAULT_POOL = ROOT / "conf" / "pool" / "replay_plus_smollm2.yaml"
"""The logged replays plus SmolLM2 on a local vLLM engine: prompts nobody logged get a real answer."""
ARGS = ("config", "pool", "add_candidates", "selector", "serving", "router_r1", "gmtrouter", "intent", "routers", "dev")
"""What ``build_app`` accepts."""


def candidate_costs(pool: dict[str, Any]) -> dict[str, float]:
    """Price per candidate for cost awareness: mean of input and output USD per 1M tokens."""
    return {c["name"]: (float(c.get("price_in", 0.0)) + float(c.get("price_out", 0.0))) / 2
            for c in pool.get("candidates", [])}


def _under_root(path: str, root: Path) -> str:
    return path if Path(path).is_absolute() else str(root / path)


@dataclass(frozen=True)
class AppConfig:
    """Everything a replica of the app needs, as plain data (picklable, no secrets once ``with_keys`` ran)."""

    selector: dict[str, Any]
    """``SelectorConfig``'s fields in the flat shape: costs from the pool's prices, the storage path absolute, the
    traffic log's propensity draws filled in."""
    serving: dict[str, Any]
    """``ServingConfig``'s fields (without key material after ``with_keys``)."""
    pool: dict[str, Any]
    """The candidate pool (``read_pool_config``)."""
    routers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Served routers: name -> {path, state, version}, paths absolute (``router_entries``)."""
    router_r1: dict[str, Any] = field(default_factory=dict)
    gmtrouter: dict[str, Any] = field(default_factory=dict)
    intent: dict[str, Any] = field(default_factory=dict)
    api_key_digests: tuple = ()
    """The API keys' digests (``ApiKeyAuth.digests``), set by ``with_keys``."""

    @classmethod
    def load(cls, args: dict[str, Any] | None = None, root: Path = ROOT) -> AppConfig:
        """Compose the app's config from the YAML files named in ``args`` plus its overrides; errors name the field."""
        args = dict(args or {})
        path = Path(args.pop("config", DEFAULT_CONFIG))
        if not path.is_absolute():
            path = root / path
        cfg = yaml.safe_load(DEFAULT_CONFIG.read_text()) or {}
        if path.resolve() != DEFAULT_CONFIG.resolve():
            # a variant file sets only what differs from rl_driven.yaml
            for key, value in (yaml.safe_load(path.read_text()) or {}).items():
                if key == "selector" and isinstance(value, dict):  # VSR's algorithm/decisions shape, as printed
                    value = SelectorConfig.flat_fields(value)
                cfg[key] = {**(cfg.get(key) or {}), **value} if isinstance(value, dict) else value
        pool = read_pool_config(args.pop("pool", cfg.pop("pool", None)) or DEFAULT_POOL, root)
        routers = {**(cfg.get("routers") or {}), **(args.pop("routers", None) or {})}
        for key in ("selector", "serving", "router_r1", "gmtrouter", "intent"):
            if key in args:
                value = args.pop(key) or {}
                if key == "selector":
                    value = SelectorConfig.flat_fields(value)
                cfg[key] = {**(cfg.get(key) or {}), **value}
        serving = dict(cfg.get("serving") or {})
        if "dev" in args:  # `serve run serve.app:build_app dev=true` passes text
            dev = args.pop("dev")
            serving["dev"] = dev is True or str(dev).lower() in ("1", "true")
        extra = args.pop("add_candidates", None) or []
        if extra:  # e.g. OpenAI-compatible upstreams, keys from the environment (options.api_key_env)
            pool = {**pool, "candidates": [*pool["candidates"], *extra]}
        if args:
            raise ValueError(f"unknown app args {sorted(args)}; expected {', '.join(ARGS)}")
        selector = {"costs": candidate_costs(pool), **(cfg.get("selector") or {})}
        if selector.get("storage_path"):
            selector["storage_path"] = _under_root(selector["storage_path"], root)
        budgets = serving.get("budgets")
        if isinstance(budgets, dict) and budgets.get("limits"):
            serving["budgets"] = {**budgets, "path": _under_root(budgets.get("path") or "outputs/budgets/spend.log", root)}
        from rlrouter.serving.served_routers import router_entries
        from rlrouter.serving.traffic import selector_defaults

        out = cls(selector=selector_defaults(selector, serving), serving=serving, pool=pool,
                  routers=router_entries(routers, root), router_r1=dict(cfg.get("router_r1") or {}),
                  gmtrouter=dict(cfg.get("gmtrouter") or {}), intent=dict(cfg.get("intent") or {}))
        out.check()
        return out

    def check(self) -> None:
        """Fail on the driver, naming the field: the selector's and serving's fields, the served routers' folders
        and candidates."""
        SelectorConfig.from_dict(self.selector)
        ServingConfig.from_dict(self.serving)
        if self.routers:
            from rlrouter.serving.router_models import candidate_map
            from rlrouter.serving.served_routers import read_manifests

            candidate_map(read_manifests(self.routers), self.candidates, self.name_map)

    def with_keys(self, environ: dict[str, str] | None = None) -> tuple[AppConfig, list]:
        """(this config holding the API keys' digests and no key material, the keys read): refuses to start
        without a key, or with a placeholder outside dev, saying why."""
        from rlrouter.serving.auth import ApiKeyAuth

        keys = self.serving_config.startup_keys(environ)
        return dataclasses.replace(self, api_key_digests=tuple(ApiKeyAuth(keys).digests()),
                                   serving=ServingConfig.without_secrets(self.serving)), keys

    @property
    def selector_config(self) -> SelectorConfig:
        return SelectorConfig.from_dict(self.selector)

    @property
    def serving_config(self) -> ServingConfig:
        return ServingConfig.from_dict(self.serving)

    @property
    def candidates(self) -> list[str]:
        """The pool's candidate names, in order."""
        return [c["name"] for c in self.pool["candidates"]]

    @property
    def name_map(self) -> dict[str, str]:
        """Candidate name -> the logged model it replays (GMTRouter and the served routers score those names)."""
        return {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in self.pool["candidates"]}

    @property
    def budgets(self) -> dict[str, Any] | None:
        """The spend budgets the selector's replica keeps, or None when off."""
        b = self.serving_config.budgets
        return b.to_dict() if b.enabled else None


@dataclass(frozen=True)
class AppParts:
    """The optional deployments beside the selector: bound deployments when the app is built, their handles in a
    replica (Serve swaps one for the other in place); None where the config enables none."""

    router_r1: Any = None
    """A Router-R1 policy: async ``route(query) -> {selected_model, thinking, full_response}``."""
    router_r1_name: str = "router-r1"
    gmt: Any = None
    """GMTRouter: ``score(user_id, query) -> {"scores": {...}} | {"unknown_user": id}``."""
    intent: Any = None
    """The intent classifier: ``classify(texts) -> [(label, confidence)]``."""
    routers: Any = None
    """The served routers (one deployment holds them all)."""
