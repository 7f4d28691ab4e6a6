"""The reward of the PPO phase, from config: the classification rewards of ``rlrouter.rewards``.

``reward_metric`` (the seed's ``rl_training`` field) may be
- a name: ``accuracy``, ``f1`` / ``macro_f1`` (per batch), ``calibration``;
- ``"pkg.module:function"``: a user's function of the reward contract;
- a mapping ``{"name": ..., **params}`` or a list of them (a weighted sum), as ``build_reward`` reads;
- a callable ``fn(prompts, completions, **columns) -> list[float | None]``;
- a function with the seed's signature ``fn(predictions, labels, confidences)`` (004, "Use Custom
  Reward Function") taking tensors and returning one reward per sample: labels become class indices,
  confidences a float tensor (:class:`TensorReward`).

The PPO loop calls it with the predicted labels as completions and the columns ``labels`` (gold) and
``confidences`` (the policy's probability of its prediction).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

ALIASES = {"f1": "macro_f1", "macro-f1": "macro_f1", "acc": "accuracy"}
SEED_SIGNATURE = ("predictions", "labels", "confidences")


def has_seed_signature(fn: Callable[..., Any]) -> bool:
    """True for ``fn(predictions, labels, confidences)``: the seed's custom reward, not the TRL contract."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return tuple(params[:3]) == SEED_SIGNATURE


class TensorReward:
    """A seed-style reward ``fn(predictions, labels, confidences) -> tensor`` under the reward contract.

    Predictions and gold labels (strings) become int64 class indices over the batch's label names
    (only equality between them is meaningful), confidences a float32 tensor; a sample without a gold
    label gets ``None``.
    """

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "custom")
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        import torch

        from rlrouter.rewards.base import check_batch, check_output, column, completion_text, mean_of

        n = check_batch(prompts, completions, self.__name__)
        labels = column(kwargs, "labels", n, self.__name__)
        preds = column(kwargs, "predictions", n, self.__name__, required=False) or \
            [completion_text(c) for c in completions]
        conf = column(kwargs, "confidences", n, self.__name__)
        names = sorted({str(x) for x in [*preds, *labels] if x is not None})
        index = {name: i for i, name in enumerate(names)}
        p = torch.tensor([index[str(x)] for x in preds], dtype=torch.long)
        y = torch.tensor([-1 if x is None else index[str(x)] for x in labels], dtype=torch.long)
        c = torch.tensor([float(x) for x in conf], dtype=torch.float32)
        out = check_output(self.fn(p, y, c), n, self.__name__)
        values = [None if g is None else v for v, g in zip(out, labels)]
        self.last_metrics = {f"reward/{self.__name__}": mean_of(values)}
        return values


def resolve_reward(spec: Any, path: str = "rl_training.reward_metric") -> Callable[..., list[float | None]]:
    """The reward function ``spec`` describes (module docstring); errors name ``path``."""
    from rlrouter.rewards.base import import_callable
    from rlrouter.rewards.classification import CustomReward
    from rlrouter.rewards.registry import build_reward

    if callable(spec):
        return TensorReward(spec) if has_seed_signature(spec) else CustomReward(spec)
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(spec):
            spec = OmegaConf.to_container(spec, resolve=True)
    except ImportError:
        pass
    if isinstance(spec, str):
        name = ALIASES.get(spec.strip().lower(), spec.strip())
        if ":" in name:
            fn = import_callable(name, path)
            return TensorReward(fn) if has_seed_signature(fn) else CustomReward(fn)
        if name == "custom":
            raise ValueError(f"{path}: 'custom' needs the function: give it as 'pkg.module:function' "
                             f"(fn(predictions, labels, confidences) or the reward contract)")
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
