"""Algorithms by name, as verl's ``core_algos``: algorithm configs, advantage estimators and policy losses.

The learner never asks which algorithm it runs. It builds the config registered under
``learner.algo`` and looks up the estimator and the loss that config names (``adv_estimator``,
``policy_loss``). A new algorithm registers its pieces in its own module; nothing else changes.

Every estimator and loss takes the same arguments, so the learner calls them all one way:

- advantage estimator: ``(rewards (B,), mask (B, T), cfg, *, values, old_logp, ref_logp, well_formed)`` ->
  ``(advantages (B, T), returns (B, T) or None)``; ``values`` are the rollout-time critic values
  (None without a critic), ``well_formed`` (B,) which samples passed the format check (or None);
- policy loss: ``(logp, old_logp, advantages, mask, cfg, *, values, old_values, returns, ref_logp,
  entropy)`` -> ``(loss, metrics)``, all ``(B, T)``.

Importing ``rlrouter.algos`` registers the built-in GRPO and PPO (see ``rlrouter/algos/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

AdvEstimatorFn = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class AdvEstimator:
    """A registered advantage estimator and whether it needs a critic's values."""

    name: str
    fn: AdvEstimatorFn
    critic: bool
    """True: the learner builds a value head and passes rollout-time ``values`` (GAE); False: no critic."""

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.fn(*args, **kwargs)


ALGO_CONFIGS: dict[str, type] = {}
"""``learner.algo`` -> the dataclass its knobs (``learner.<algo>``) build."""
ADV_ESTIMATORS: dict[str, AdvEstimator] = {}
POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def _register(table: dict[str, Any], kind: str, name: str, value: Any) -> None:
    if name in table and table[name] != value:
        raise ValueError(f"{kind} '{name}' is already registered")
    table[name] = value


def _get(table: dict[str, Any], kind: str, name: str) -> Any:
    if name not in table:
        raise ValueError(f"{kind}: unknown '{name}', registered: {sorted(table)}")
    return table[name]


def register_algo(name: str) -> Callable[[type], type]:
    """Class decorator: ``learner.algo: <name>`` builds this config from ``learner.<name>``."""
    def deco(cls: type) -> type:
        _register(ALGO_CONFIGS, "algo", name, cls)
        return cls
    return deco


def register_adv_est(name: str, critic: bool = False) -> Callable[[F], F]:
    """Function decorator: register an advantage estimator under ``name`` (``critic``: it needs values)."""
    def deco(fn: F) -> F:
        _register(ADV_ESTIMATORS, "adv_estimator", name, AdvEstimator(name, fn, critic))
        return fn
    return deco


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Function decorator: register a policy loss under ``name``."""
    def deco(fn: F) -> F:
        _register(POLICY_LOSSES, "policy_loss", name, fn)
        return fn
    return deco


def get_algo_config(name: str) -> type:
    return _get(ALGO_CONFIGS, "learner.algo", name)


def get_adv_estimator(name: str) -> AdvEstimator:
    return _get(ADV_ESTIMATORS, "adv_estimator", name)


def get_policy_loss(name: str) -> PolicyLossFn:
    return _get(POLICY_LOSSES, "policy_loss", name)
