"""The router interface the evaluation job runs, and the registry that builds routers from config.

A router maps prompts to candidate indices (``decide``). A *threshold* router also scores each prompt
by how much it needs the strong candidate (``strong_score``); sweeping a threshold over that score
traces the router's whole cost-quality curve (RouteLLM's ``calculate_strong_win_rate``).

Routers are built from config by ``type``::

    router:
      type: knn            # a registered name, or "package.module:factory" for code outside eval/
      name: knn-k20        # label in the report (defaults to type)
      k: 20                # the rest goes to the factory

Other work plugs its router in without touching this package: either decorate a factory with
``@register_router("router_r1")`` in a module listed under ``eval.plugins``, or name the factory as
``type: rlrouter.rollout.eval_adapter:build``. A factory is ``(cfg: dict, ctx: RouterContext) -> Router``.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, TypeVar

import numpy as np

from rlrouter.routers.reader import EvalSet


class Router(abc.ABC):
    """Something that picks a candidate (by index into the eval set's candidates) for each prompt."""

    name: str = "router"

    def fit(self, train: EvalSet) -> None:  # noqa: B027 - most adapters load a trained checkpoint
        """Learn from the training split's logged outcomes (baselines that train do; checkpoints don't)."""

    @abc.abstractmethod
    def decide(self, prompts: list[str]) -> np.ndarray:
        """(N,) candidate index per prompt."""

    def replay(self, test: EvalSet) -> np.ndarray:
        """(N,) decisions on the test stream. A frozen router just decides; an online one (the selector
        with ``online: true``) may learn from the outcome of each decision it made before the next."""
        return self.decide(test.prompts)


class ThresholdRouter(Router):
    """A two-candidate router: strong when ``strong_score(prompt) >= threshold``, else weak."""

    def __init__(self, name: str, weak: int, strong: int, threshold: float = 0.5):
        self.name = name
        self.weak = weak
        self.strong = strong
        self.threshold = threshold

    @abc.abstractmethod
    def strong_score(self, prompts: list[str]) -> np.ndarray:
        """(N,) how much each prompt needs the strong candidate; higher means more."""

    def decide(self, prompts: list[str]) -> np.ndarray:
        return np.where(self.strong_score(prompts) >= self.threshold, self.strong, self.weak)

    def calibrate(self, prompts: list[str], strong_share: float, scores: np.ndarray | None = None) -> float:
        """Set the threshold so that ``strong_share`` of ``prompts`` go to strong (RouteLLM's
        ``calibrate_threshold``: a quantile of the router's scores on held-in prompts). ``scores``: this
        router's ``strong_score(prompts)`` when the caller has them already (a slow router scores once)."""
        if not 0.0 <= strong_share <= 1.0:
            raise ValueError(f"operating_strong_share: must be in [0, 1], got {strong_share}")
        s = self.strong_score(prompts) if scores is None else np.asarray(scores)
        if len(s) != len(prompts):
            raise ValueError(f"{self.name}: calibrate got {len(s)} scores for {len(prompts)} prompts")
        self.threshold = share_threshold(s, strong_share)
        return self.threshold


def share_threshold(scores: np.ndarray, strong_share: float) -> float:
    """The threshold that sends ``strong_share`` of these scores to strong (up to ties): their
    (1 - share) quantile, or +inf for a share of 0."""
    return float(np.quantile(scores, 1.0 - strong_share)) if strong_share > 0 else float(np.inf)


@dataclass
class RouterContext:
    """What a factory may need: the candidates, which is weak/strong, the training split, an embedder."""

    candidates: list[str]
    weak: int
    strong: int
    train: EvalSet
    embed: Callable[[list[str]], np.ndarray]
    seed: int = 0
    work_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def index(self, which: str, field: str) -> int:
        """A candidate named in a router's config (``router.<field>``): "strong", "weak" or a candidate's name."""
        if which == "strong":
            return self.strong
        if which == "weak":
            return self.weak
        if which not in self.candidates:
            raise ValueError(f"router.{field}: '{which}' is not 'strong', 'weak' or one of {self.candidates}")
        return self.candidates.index(which)


F = TypeVar("F", bound=Callable[..., Any])


class Registry(dict, Generic[F]):
    """Factories by type name (a dict), filled by the ``register`` decorator; ``what`` names the kind in errors."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, type_name: str) -> Callable[[F], F]:
        """Decorator: make ``type_name`` buildable from config."""

        def deco(factory: F) -> F:
            if type_name in self and self[type_name] is not factory:
                raise ValueError(f"{self.what} '{type_name}' is already registered")
            self[type_name] = factory
            return factory

        return deco

    def types(self) -> list[str]:
        return sorted(self)


RouterFactory = Callable[[dict[str, Any], RouterContext], Router]
_REGISTRY: Registry[RouterFactory] = Registry("router type")
register_router = _REGISTRY.register
registered_types = _REGISTRY.types


def _import_attr(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"router.type: '{spec}' is neither a registered type nor 'package.module:factory'")
    return getattr(importlib.import_module(module), attr)


def build_router(cfg: Mapping[str, Any], ctx: RouterContext) -> Router:
    """Build a router from its config mapping (see the module docstring)."""
    cfg = dict(cfg)
    type_name = cfg.pop("type", None)
    if not type_name or not isinstance(type_name, str):
        raise ValueError(f"router.type: missing; registered types: {registered_types()}")
    name = cfg.pop("name", None) or type_name
    if type_name in _REGISTRY:
        factory = _REGISTRY[type_name]
    elif ":" in type_name:
        factory = _import_attr(type_name)
    else:
        raise ValueError(f"router.type: unknown '{type_name}'; registered types: {registered_types()}")
    router = factory(cfg, ctx)
    if not isinstance(router, Router):
        raise TypeError(f"router.type '{type_name}': factory returned {type(router).__name__}, not a Router")
    router.name = name
    return router


def load_plugins(modules: list[str]) -> None:
    """Import modules that register router types (``eval.plugins`` in config)."""
    for m in modules:
        importlib.import_module(m)
