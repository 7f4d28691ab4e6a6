"""Build reward functions from config dicts: ``build_reward({"name": ..., **params})``.

A reward config names a registered kind and its parameters, either flat or under ``params``::

    {"name": "router_r1", "alpha": 0.6, "candidates": ["qwen-7b", "llama-70b"]}
    {"name": "router_r1", "params": {"alpha": 0.6, "candidates": [...]}}
    {"name": "combined", "functions": [{"name": "accuracy", "weight": 1.0},
                                       {"name": "calibration", "mode": "brier", "weight": 0.5}]}

A list of configs is shorthand for ``combined``; each item's optional ``weight`` (default 1) is its
weight in the sum (:class:`~rlrouter.rewards.base.CombinedReward`). Hydra ``DictConfig`` works too.
Every problem raises :class:`~rlrouter.rewards.base.RewardConfigError` with the dotted path of the bad
field (``reward.functions[1].alpha``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from rlrouter.config import to_plain
from rlrouter.rewards.base import CombinedReward, RewardConfigError
from rlrouter.rewards.budget import ToolBudgetReward
from rlrouter.rewards.classification import AccuracyReward, CalibrationReward, CustomReward, MacroF1Reward
from rlrouter.rewards.route_table import RouteTableReward
from rlrouter.rewards.router_r1 import (
    RouterR1CostReward,
    RouterR1FormatReward,
    RouterR1OutcomeReward,
    RouterR1Reward,
)

REGISTRY: dict[str, Callable[..., Callable[..., Any]]] = {
    "router_r1": RouterR1Reward,
    "router_r1_format": RouterR1FormatReward,
    "router_r1_outcome": RouterR1OutcomeReward,
    "router_r1_cost": RouterR1CostReward,
    "tool_budget": ToolBudgetReward,
    "accuracy": AccuracyReward,
    "macro_f1": MacroF1Reward,
    "calibration": CalibrationReward,
    "custom": CustomReward,
    "route_table": RouteTableReward,
}


def register_reward(name: str, factory: Callable[..., Callable[..., Any]]) -> None:
    """Make ``factory(**params)`` buildable as ``{"name": name, ...}`` (e.g. from another package)."""
    if name in REGISTRY or name == "combined":
        raise ValueError(f"reward '{name}' is already registered")
    REGISTRY[name] = factory


def with_params(cfg: Any, name: str, **params: Any) -> Any:
    """``cfg`` with ``params`` set on every function of kind ``name`` that does not set them itself
    (values only the job knows, such as the pool's candidates)."""
    cfg = to_plain(cfg)
    if isinstance(cfg, (list, tuple)):
        return [with_params(c, name, **params) for c in cfg]
    if not isinstance(cfg, Mapping):
        return cfg
    out = dict(cfg)
    if out.get("name") == name:
        nested = out.get("params")
        for k, v in params.items():
            if k not in out and not (isinstance(nested, Mapping) and k in nested):
                out[k] = v
    if out.get("name") == "combined" and isinstance(to_plain(out.get("functions")), (list, tuple)):
        out["functions"] = [with_params(f, name, **params) for f in to_plain(out["functions"])]
    return out


def build_reward(cfg: Any, path: str = "reward") -> Callable[..., Any]:
    """The reward function a config describes (module docstring)."""
    cfg = to_plain(cfg)
    if isinstance(cfg, (list, tuple)):
        return _build_combined({"functions": list(cfg)}, path, functions_path=path)
    if not isinstance(cfg, Mapping):
        raise RewardConfigError(path, f"expected a mapping with 'name', got {type(cfg).__name__}")
    if "name" not in cfg:
        raise RewardConfigError(f"{path}.name", f"missing; expected one of {sorted([*REGISTRY, 'combined'])}")
    name = cfg["name"]
    if name == "combined":
        return _build_combined(cfg, path, functions_path=f"{path}.functions")
    if name not in REGISTRY:
        raise RewardConfigError(f"{path}.name", f"unknown reward '{name}'; expected one of "
                                f"{sorted([*REGISTRY, 'combined'])}")
    params, where = _params(cfg, path)
    factory = REGISTRY[name]
    _check_signature(factory, params, where, path)
    try:
        return factory(**params)
    except RewardConfigError as e:
        # the constructor names its own argument ("alpha", "prices.gpt-4"); prefix where it came from
        head = e.field.split(".")[0].split("[")[0]
        full = where[head] + e.field[len(head):] if head in where else f"{path}.{e.field}"
        raise RewardConfigError(full, e.message) from None


def _params(cfg: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge flat keys and ``params``; ``where`` maps each key to its dotted path for errors."""
    params: dict[str, Any] = {}
    where: dict[str, str] = {}
    nested = cfg.get("params")
    if nested is not None:
        nested = to_plain(nested)
        if not isinstance(nested, Mapping):
            raise RewardConfigError(f"{path}.params", f"expected a mapping, got {type(nested).__name__}")
        for k, v in nested.items():
            params[k] = v
            where[k] = f"{path}.params.{k}"
    for k, v in cfg.items():
        if k in ("name", "params", "weight"):
            continue
        if k in params:
            raise RewardConfigError(f"{path}.{k}", "given both flat and under 'params'")
        params[k] = v
        where[k] = f"{path}.{k}"
    return params, where


def _check_signature(factory: Callable[..., Any], params: dict[str, Any], where: dict[str, str], path: str) -> None:
    sig = inspect.signature(factory)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    names = [n for n, p in sig.parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if not accepts_any:
        for k in params:
            if k not in names:
                raise RewardConfigError(where[k], f"unknown parameter; expected one of {names}")
    for n in names:
        p = sig.parameters[n]
        if p.default is p.empty and n not in params:
            raise RewardConfigError(f"{path}.{n}", "missing (required)")


def _build_combined(cfg: Mapping[str, Any], path: str, functions_path: str) -> CombinedReward:
    extra = sorted(set(cfg) - {"name", "functions", "weight"})
    if extra:
        raise RewardConfigError(f"{path}.{extra[0]}", "unknown key for 'combined'; expected 'functions'")
    functions = to_plain(cfg.get("functions"))
    if not isinstance(functions, (list, tuple)) or not functions:
        raise RewardConfigError(functions_path, "expected a non-empty list of reward configs")
    built, weights = [], []
    for i, sub in enumerate(functions):
        sub_path = f"{functions_path}[{i}]"
        sub = to_plain(sub)
        weight = sub.get("weight", 1.0) if isinstance(sub, Mapping) else 1.0
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise RewardConfigError(f"{sub_path}.weight", f"expected a number, got {weight!r}")
        built.append(build_reward(sub, sub_path))
        weights.append(float(weight))
    return CombinedReward(built, weights)
