"""The reward of the PPO phase, from config: the classification rewards of ``rlrouter.rewards``.

``reward_metric`` (the seed's ``rl_training`` field) may be
- a name: ``accuracy``, ``f1`` / ``macro_f1`` (per batch), ``calibration``;
- ``"pkg.module:function"``: a user's function of the reward contract;
- a mapping ``{"name": ..., **params}`` or a list of them (a weighted sum), as ``build_reward`` reads;
- a callable ``fn(prompts, completions, **columns) -> list[float | None]``.

The PPO loop calls it with the predicted labels as completions and the columns ``labels`` (gold) and
``confidences`` (the policy's probability of its prediction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ALIASES = {"f1": "macro_f1", "macro-f1": "macro_f1", "acc": "accuracy"}


def resolve_reward(spec: Any, path: str = "rl_training.reward_metric") -> Callable[..., list[float | None]]:
    """The reward function ``spec`` describes (module docstring); errors name ``path``."""
    from rlrouter.rewards.classification import CustomReward
    from rlrouter.rewards.registry import build_reward

    if callable(spec):
        return CustomReward(spec)
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(spec):
            spec = OmegaConf.to_container(spec, resolve=True)
    except ImportError:
        pass
    if isinstance(spec, str):
        name = ALIASES.get(spec.strip().lower(), spec.strip())
        if ":" in name:
            return CustomReward(name)
        return build_reward({"name": name}, path)
    if isinstance(spec, Mapping):
        spec = dict(spec)
        if "name" in spec:
            spec["name"] = ALIASES.get(str(spec["name"]).lower(), spec["name"])
        return build_reward(spec, path)
    if isinstance(spec, (list, tuple)):
        items = [dict(s, name=ALIASES.get(str(s.get("name", "")).lower(), s.get("name")))
                 if isinstance(s, Mapping) else {"name": ALIASES.get(str(s).lower(), s)} for s in spec]
        return build_reward(items, path)
    raise TypeError(f"{path}: expected a reward name, 'pkg.module:function', a mapping or a list, "
                    f"got {type(spec).__name__}")
