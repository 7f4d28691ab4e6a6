"""Rewards for the intent classifier's PPO: accuracy, macro F1, calibration, custom.

The policy there is a classifier: for each prompt (a user query) it picks a label and reports a
confidence. The rewards follow the TRL contract and read their inputs from the batch's columns:

* ``labels`` (or ``label``): the gold label per sample; ``None`` marks an unlabeled sample, whose
  reward is ``None`` (not applicable);
* ``predictions``: the predicted label per sample; when absent the completion text is the prediction;
* ``confidences``: the probability the policy gave its prediction, in [0, 1] (calibration only).

Labels are compared as strings, stripped and lowercased unless ``normalize=False``, so ``3``, ``"3"``
and ``" 3 "`` are the same label.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlrouter.rewards.classification_metrics import (
    DEFAULT_ECE_BINS,
    calibration_gaps,
    class_counts,
    expected_calibration_error,
    f1_from_counts,
    macro_f1,
)
from rlrouter.rewards.base import (
    Reward,
    RewardConfigError,
    check_batch,
    check_output,
    column,
    completion_text,
    import_callable,
    mean_of,
)


def _label(x: Any, normalize: bool) -> str:
    s = x if isinstance(x, str) else completion_text(x) if isinstance(x, (list, dict)) else str(x)
    return s.strip().lower() if normalize else s


def _inputs(kwargs: dict[str, Any], completions: list[Any], owner: str,
            normalize: bool) -> tuple[list[str | None], list[str]]:
    n = len(completions)
    labels = column(kwargs, "labels", n, owner, required=False)
    if labels is None:
        labels = column(kwargs, "label", n, owner, required=False)
    if labels is None:
        raise KeyError(f"reward '{owner}': dataset column 'labels' (or 'label') is missing from the batch "
                       f"(columns present: {sorted(kwargs)})")
    preds = column(kwargs, "predictions", n, owner, required=False)
    if preds is None:
        preds = [completion_text(c) for c in completions]
    golds = [None if g is None else _label(g, normalize) for g in labels]
    return golds, [_label(p, normalize) for p in preds]


# ---------------------------------------------------------------- metrics
# macro-F1 and ECE live once, in rlrouter.rewards.classification_metrics; only the leave-one-out form is reward-specific


def leave_one_out_macro_f1(predictions: Sequence[str], labels: Sequence[str]) -> list[float]:
    """``macro_f1`` of the batch without sample ``i``, for every ``i``, in O(n + classes).

    Removing one sample changes the counts of at most two classes (its prediction and its label), and
    a class whose counts all fall to 0 leaves the average, as it would be absent from the batch.
    """
    counts = class_counts(labels, predictions)
    per_class = {c: f1_from_counts(*v) for c, v in counts.items()}
    total, n_classes = sum(per_class.values()), len(per_class)
    out = []
    for p, y in zip(predictions, labels):
        changed = {c: list(counts[c]) for c in {p, y}}
        if p == y:
            changed[y][0] -= 1
        else:
            changed[p][1] -= 1
            changed[y][2] -= 1
        s, k = total, n_classes
        for c, v in changed.items():
            s -= per_class[c]
            if any(v):
                s += f1_from_counts(*v)
            else:
                k -= 1
        out.append(s / k if k else 0.0)
    return out


# ---------------------------------------------------------------- rewards


class AccuracyReward:
    """1 if the prediction equals the label, else 0; ``None`` for unlabeled samples."""

    __name__ = "accuracy"

    def __init__(self, normalize: bool = True):
        self.normalize = bool(normalize)
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        check_batch(prompts, completions, self.__name__)
        golds, preds = _inputs(kwargs, completions, self.__name__, self.normalize)
        rewards: list[Reward] = [None if g is None else float(p == g) for p, g in zip(preds, golds)]
        self.last_metrics = {"reward/accuracy": mean_of(rewards)}
        return rewards


class MacroF1Reward:
    """Macro F1 of the batch's labeled samples, turned into per-sample rewards.

    * ``mode="batch"``: every labeled sample gets the batch's macro F1 (the metric itself; it ranks
      batches, not samples, so it suits a value-baselined PPO more than group-relative advantages);
    * ``mode="leave_one_out"``: sample ``i`` gets ``m * (F1(batch) - F1(batch without i))`` with ``m``
      labeled samples: its marginal contribution to the batch's F1 (a difference reward, Wolpert &
      Tumer 2002), scaled by ``m`` to stay of order 1 whatever the batch size. Correct predictions of
      rare classes earn most; mistakes earn negative rewards.
    """

    __name__ = "macro_f1"
    MODES = ("batch", "leave_one_out")

    def __init__(self, mode: str = "batch", normalize: bool = True):
        if mode not in self.MODES:
            raise RewardConfigError("mode", f"unknown '{mode}', expected one of {self.MODES}")
        self.mode = mode
        self.normalize = bool(normalize)
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        golds, preds = _inputs(kwargs, completions, self.__name__, self.normalize)
        labeled = [i for i in range(n) if golds[i] is not None]
        p = [preds[i] for i in labeled]
        y = [golds[i] for i in labeled]  # type: ignore[misc]
        f1 = macro_f1(y, p)
        rewards: list[Reward] = [None] * n
        m = len(labeled)
        without = leave_one_out_macro_f1(p, y) if self.mode == "leave_one_out" else []
        for k, i in enumerate(labeled):
            rewards[i] = f1 if self.mode == "batch" else m * (f1 - without[k])
        self.last_metrics = {"reward/macro_f1": f1 if m else math.nan}
        return rewards


class CalibrationReward:
    """Rewards honest confidences: sure and right scores high, sure and wrong scores low.

    * ``mode="brier"`` (default): ``1 - 2 (c - y)^2`` with ``y`` 1 if correct. Confident and correct
      (c=1, y=1) -> 1; confident mistake (c=1, y=0) -> -1; c=0.5 -> 0.5 either way. The Brier score is
      a proper scoring rule, so the expected reward is highest when ``c`` is the true probability of
      being right: the policy cannot gain by over- or under-stating its confidence.
    * ``mode="ece"``: ``-|acc_b - conf_b|`` of the sample's confidence bin over the batch; the mean of
      these rewards is exactly ``-ECE`` of the batch (``n_bins`` equal-width bins).

    Samples without a label or a confidence get ``None``; without a ``confidences`` column the reward is
    not applicable to any sample.
    """

    __name__ = "calibration"
    MODES = ("brier", "ece")

    def __init__(self, mode: str = "brier", n_bins: int = DEFAULT_ECE_BINS, normalize: bool = True):
        if mode not in self.MODES:
            raise RewardConfigError("mode", f"unknown '{mode}', expected one of {self.MODES}")
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise RewardConfigError("n_bins", f"expected an int >= 1, got {n_bins!r}")
        self.mode = mode
        self.n_bins = n_bins
        self.normalize = bool(normalize)
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        confs = column(kwargs, "confidences", n, self.__name__, required=False)
        if confs is None:
            self.last_metrics = {}
            return [None] * n
        golds, preds = _inputs(kwargs, completions, self.__name__, self.normalize)
        idx, c, y = [], [], []
        for i in range(n):
            if golds[i] is None or confs[i] is None:
                continue
            ci = confs[i]
            if isinstance(ci, bool) or not isinstance(ci, (int, float)) or not 0.0 <= ci <= 1.0:
                raise ValueError(f"reward '{self.__name__}': confidences[{i}] is {ci!r}, expected a number in [0, 1]")
            idx.append(i)
            c.append(float(ci))
            y.append(float(preds[i] == golds[i]))
        rewards: list[Reward] = [None] * n
        if self.mode == "brier":
            values = [1.0 - 2.0 * (ci - yi) ** 2 for ci, yi in zip(c, y)]
        else:
            values = [-g for g in calibration_gaps(c, y, self.n_bins)]
        for i, v in zip(idx, values):
            rewards[i] = v
        self.last_metrics = {"reward/calibration": mean_of(rewards),
                             "reward/ece": expected_calibration_error(c, y, self.n_bins) if c else math.nan}
        return rewards


class CustomReward:
    """A user's reward function, given as a callable or as ``"pkg.module:function"`` from config.

    It is called as ``fn(prompts, completions, **params, **columns)``; ``params`` (every keyword given
    here besides ``fn`` and ``metric_name``, the name its metric is logged under) come from config and
    may not share a name with a batch column. A function without ``**kwargs`` gets only the columns it
    names as parameters. Its output is checked (one float or ``None`` per sample).
    """

    def __init__(self, fn: Callable[..., Any] | str, metric_name: str | None = None, **params: Any):
        self.fn = import_callable(fn, "fn") if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise RewardConfigError("fn", f"expected a callable or 'pkg.module:function', got {type(fn).__name__}")
        self.params = dict(params)
        self._check_params()
        self.__name__ = metric_name or getattr(self.fn, "__name__", "custom")
        self.last_metrics: dict[str, float] = {}

    def _check_params(self) -> None:
        self._accepts: set[str] | None = None  # None: takes **kwargs, gets every column
        try:
            sig = inspect.signature(self.fn)
        except (TypeError, ValueError):  # builtins without a signature: checked at call time
            return
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return
        self._accepts = set(sig.parameters)
        for key in self.params:
            if key not in sig.parameters:
                raise RewardConfigError(key, f"not a parameter of {getattr(self.fn, '__name__', self.fn)}"
                                        f"; it takes {list(sig.parameters)}")

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        if self._accepts is not None:  # a function without **kwargs gets only the columns it names
            kwargs = {k: v for k, v in kwargs.items() if k in self._accepts}
        clash = sorted(set(self.params) & set(kwargs))
        if clash:
            raise ValueError(f"reward '{self.__name__}': params {clash} clash with batch columns of the same name")
        values = check_output(self.fn(prompts, completions, **self.params, **kwargs), n, self.__name__)
        self.last_metrics = {f"reward/{self.__name__}": mean_of(values)}
        return values
