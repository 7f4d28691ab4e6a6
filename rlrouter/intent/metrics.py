"""Classification metrics of the supervised-vs-RL table: accuracy, macro-F1, expected calibration error.

Plain Python over lists so they can be checked by hand in tests and used without torch.
"""

from __future__ import annotations

from typing import Sequence


def accuracy(y_true: Sequence[str], y_pred: Sequence[str]) -> float:
    _check(y_true, y_pred)
    return sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true)


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] | None = None) -> float:
    """Unweighted mean of per-label F1 over ``labels`` (default: labels seen in y_true or y_pred).

    A label with no true and no predicted example has F1 0 when it is listed in ``labels``; by default
    only labels that occur are averaged (sklearn's behaviour).
    """
    _check(y_true, y_pred)
    labels = list(labels) if labels is not None else sorted(set(y_true) | set(y_pred))
    f1s = []
    for c in labels:
        tp = sum(t == c and p == c for t, p in zip(y_true, y_pred))
        fp = sum(t != c and p == c for t, p in zip(y_true, y_pred))
        fn = sum(t == c and p != c for t, p in zip(y_true, y_pred))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = 15) -> float:
    """ECE (Guo et al., 2017): sum over equal-width confidence bins of |accuracy - confidence| weighted by
    the bin's share of examples. Bin b holds confidences in (b/n, (b+1)/n]; confidence 0 goes in bin 0."""
    if len(confidences) != len(correct) or not confidences:
        raise ValueError("confidences, correct: need the same non-zero length")
    if n_bins < 1:
        raise ValueError(f"n_bins: must be >= 1, got {n_bins}")
    sums = [[0, 0.0, 0.0] for _ in range(n_bins)]  # count, sum of confidence, sum of correct
    for c, ok in zip(confidences, correct):
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"confidences: {c} is not a probability")
        b = min(n_bins - 1, max(0, int(-(-c * n_bins // 1)) - 1))  # ceil(c * n) - 1
        sums[b][0] += 1
        sums[b][1] += c
        sums[b][2] += float(ok)
    n = len(confidences)
    return sum(abs(s_ok - s_c) / n for cnt, s_c, s_ok in sums if cnt)


def _check(y_true: Sequence, y_pred: Sequence) -> None:
    if len(y_true) != len(y_pred) or not y_true:
        raise ValueError(f"y_true, y_pred: need the same non-zero length, got {len(y_true)} and {len(y_pred)}")
