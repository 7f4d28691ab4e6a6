"""Classification metrics: accuracy, macro-F1, expected calibration error. The one copy in rlrouter.

The intent classifier's supervised-vs-RL table and the classification rewards
(``rlrouter.rewards.classification``) both read these, so a reported ECE and a rewarded ECE are the
same number. ECE follows Guo et al. (2017): ``DEFAULT_ECE_BINS`` = 15 equal-width bins, bin b holding
confidences in (b/n, (b+1)/n] (confidence 0 goes in bin 0).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

DEFAULT_ECE_BINS = 15
"""Guo et al. (2017) use 15 bins; every ECE in rlrouter (metrics tables and rewards) uses this default."""


def accuracy(y_true: Sequence[str], y_pred: Sequence[str]) -> float:
    _check(y_true, y_pred)
    return sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true)


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] | None = None) -> float:
    """Unweighted mean of per-label F1 = 2 tp / (2 tp + fp + fn) over ``labels`` (default: the labels
    seen in y_true or y_pred, as scikit-learn does; a label only ever predicted scores 0).

    A listed label with no true and no predicted example scores 0. Symmetric in y_true and y_pred.
    Empty inputs score 0.
    """
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true, y_pred: need the same length, got {len(y_true)} and {len(y_pred)}")
    counts = class_counts(y_true, y_pred)
    labels = list(labels) if labels is not None else sorted(counts)
    if not labels:
        return 0.0
    return float(sum(f1_from_counts(*counts.get(c, (0, 0, 0))) for c in labels) / len(labels))


def class_counts(y_true: Sequence[str], y_pred: Sequence[str]) -> dict[str, list[int]]:
    """label -> [tp, fp, fn] for every label that occurs in y_true or y_pred."""
    counts: dict[str, list[int]] = {}
    for y, p in zip(y_true, y_pred):
        if p == y:
            counts.setdefault(y, [0, 0, 0])[0] += 1
        else:
            counts.setdefault(p, [0, 0, 0])[1] += 1
            counts.setdefault(y, [0, 0, 0])[2] += 1
    return counts


def f1_from_counts(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def confidence_bins(confidences: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index per confidence: ceil(c * n) - 1, so bin b holds (b/n, (b+1)/n] and 0 goes in bin 0."""
    return np.clip(np.ceil(confidences * n_bins).astype(np.int64) - 1, 0, n_bins - 1)


def calibration_gaps(confidences: Sequence[float], correct: Sequence[float],
                     n_bins: int = DEFAULT_ECE_BINS) -> list[float]:
    """For each sample, ``|accuracy - mean confidence|`` of its confidence bin; their mean is the ECE."""
    conf = np.asarray(confidences, dtype=np.float64)
    corr = np.asarray(correct, dtype=np.float64)
    if conf.shape != corr.shape:
        raise ValueError(f"confidences, correct: need the same length, got {conf.size} and {corr.size}")
    if n_bins < 1:
        raise ValueError(f"n_bins: must be >= 1, got {n_bins}")
    if conf.size == 0:
        return []
    bad = (conf < 0) | (conf > 1) | np.isnan(conf)
    if bad.any():
        raise ValueError(f"confidences: {conf[bad][0]} is not a probability")
    idx = confidence_bins(conf, n_bins)
    gaps = np.zeros(n_bins)
    for b in np.unique(idx):
        in_bin = idx == b
        gaps[b] = abs(corr[in_bin].mean() - conf[in_bin].mean())
    return gaps[idx].tolist()


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[float],
                               n_bins: int = DEFAULT_ECE_BINS) -> float:
    """ECE = sum_b (n_b / n) |acc_b - conf_b| (Guo et al., 2017), the mean of :func:`calibration_gaps`."""
    if len(confidences) == 0:
        raise ValueError("confidences, correct: need a non-zero length")
    return float(np.mean(calibration_gaps(confidences, correct, n_bins)))


def _check(y_true: Sequence, y_pred: Sequence) -> None:
    if len(y_true) != len(y_pred) or not y_true:
        raise ValueError(f"y_true, y_pred: need the same non-zero length, got {len(y_true)} and {len(y_pred)}")
