"""The reward-function contract and the weighted combiner.

A reward function is a plain callable, as in TRL::

    fn(prompts: list[str], completions: list[str], **kwargs) -> list[float | None]

``kwargs`` are the dataset columns of the batch, each a list aligned with ``completions`` (TRL passes
every column it has, so a function must accept and ignore columns it does not use). ``None`` means
"not applicable to this sample" (e.g. a calibration reward on a sample without a confidence); the
combiner skips it instead of reading it as 0.

Every reward here also carries ``__name__`` (TRL logs ``reward/<__name__>``) and, after a call,
``last_metrics``: a dict of ``reward/...`` means for the logger.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

Reward = float | None


class RewardConfigError(ValueError):
    """A reward was configured wrongly. ``field`` is the dotted path of the bad field."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        self.message = message
        super().__init__(f"field '{field_path}': {message}")


@runtime_checkable
class RewardFunction(Protocol):
    """Anything callable as ``fn(prompts, completions, **columns) -> list[float | None]``."""

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]: ...


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or TRL's conversational form (a list of messages)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        return "".join(completion_text(m) for m in completion)
    raise TypeError(f"completion: expected str or a list of messages, got {type(completion).__name__}")


def column(kwargs: dict[str, Any], name: str, n: int, owner: str, required: bool = True) -> list[Any] | None:
    """Column ``name`` of the batch, checked to have ``n`` rows; ``None`` if absent and not required."""
    if name not in kwargs or kwargs[name] is None:
        if required:
            raise KeyError(f"reward '{owner}': dataset column '{name}' is missing from the batch "
                           f"(columns present: {sorted(kwargs)})")
        return None
    col = kwargs[name]
    if hasattr(col, "tolist"):  # numpy / torch columns
        col = col.tolist()
    col = list(col)
    if len(col) != n:
        raise ValueError(f"reward '{owner}': column '{name}' has {len(col)} rows, the batch has {n} completions")
    return col


def check_batch(prompts: Sequence[Any] | None, completions: Sequence[Any], owner: str) -> int:
    """Number of samples; prompts may be omitted (None) but, when given, must align with completions."""
    n = len(completions)
    if prompts is not None and len(prompts) != n:
        raise ValueError(f"reward '{owner}': {len(prompts)} prompts but {n} completions")
    return n


def mean_of(values: Sequence[Reward]) -> float:
    """Mean over the applicable (non-None) values; NaN when none is."""
    vals = [v for v in values if v is not None]
    return float(sum(vals) / len(vals)) if vals else math.nan


def reward_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def import_callable(path: str, field_path: str = "fn") -> Callable[..., Any]:
    """Import ``"pkg.module:attr"`` (or ``"pkg.module.attr"``) and check it is callable."""
    if not isinstance(path, str) or not path.strip():
        raise RewardConfigError(field_path, f"expected 'pkg.module:function', got {path!r}")
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise RewardConfigError(field_path, f"expected 'pkg.module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RewardConfigError(field_path, f"cannot import module '{module_name}': {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RewardConfigError(field_path, f"module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise RewardConfigError(field_path, f"'{path}' is not callable ({type(obj).__name__})")
    return obj


def check_output(values: Any, n: int, owner: str) -> list[Reward]:
    """Validate a reward function's output: a list of ``n`` finite numbers (bools read as 0/1) or ``None``."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"reward '{owner}' returned {type(values).__name__}, expected a list of {n} floats")
    if len(values) != n:
        raise ValueError(f"reward '{owner}' returned {len(values)} values for {n} completions")
    out: list[Reward] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        # bools pass as 0/1: a user's "is it correct" function is a fair reward
        if isinstance(v, (str, bytes)) or not hasattr(v, "__float__"):
            raise TypeError(f"reward '{owner}' value [{i}] is {type(v).__name__}, expected float or None")
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"reward '{owner}' value [{i}] is {f}, expected a finite float or None")
        out.append(f)
    return out


class CombinedReward:
    """Weighted sum of several reward functions, sample by sample.

    ``total_i = sum_k w_k * r_k,i`` over the functions whose ``r_k,i`` is not ``None``; when every
    function says ``None`` for a sample, its total is ``None`` too (nothing applied, so no signal
    rather than a fake 0). ``last_metrics`` holds ``reward/<name>`` (the unweighted mean of each
    function over its applicable samples) and ``reward/total``.
    """

    def __init__(self, functions: Sequence[Callable[..., list[Reward]]],
                 weights: Sequence[float] | None = None, name: str = "combined"):
        functions = list(functions)
        if not functions:
            raise RewardConfigError("functions", "must not be empty")
        for i, fn in enumerate(functions):
            if not callable(fn):
                raise RewardConfigError(f"functions[{i}]", f"not callable ({type(fn).__name__})")
        if weights is None:
            weights = [1.0] * len(functions)
        weights = list(weights)
        if len(weights) != len(functions):
            raise RewardConfigError("weights", f"has {len(weights)} entries for {len(functions)} functions")
        for i, w in enumerate(weights):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                raise RewardConfigError(f"weights[{i}]", f"expected a finite number, got {w!r}")
        self.functions = functions
        self.weights = [float(w) for w in weights]
        self.__name__ = name
        names = [reward_name(fn) for fn in functions]
        # two functions of the same kind get distinct metric names
        self.names = [nm if names.count(nm) == 1 else f"{nm}_{i}" for i, nm in enumerate(names)]
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        totals: list[Reward] = [None] * n
        metrics: dict[str, float] = {}
        for fn, w, nm in zip(self.functions, self.weights, self.names):
            values = check_output(fn(prompts, completions, **kwargs), n, nm)
            metrics[f"reward/{nm}"] = mean_of(values)
            for k, sub in getattr(fn, "last_metrics", {}).items():
                metrics.setdefault(k, sub)
            for i, v in enumerate(values):
                if v is not None:
                    totals[i] = (totals[i] or 0.0) + w * v
        metrics["reward/total"] = mean_of(totals)
        self.last_metrics = metrics
        return totals
