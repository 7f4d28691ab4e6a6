"""Accuracy, macro-F1 and ECE against hand-computed values."""

import pytest

from rlrouter.rewards.classification_metrics import accuracy, expected_calibration_error, macro_f1


def test_accuracy():
    assert accuracy(["a", "b", "b", "c"], ["a", "b", "c", "c"]) == pytest.approx(0.75)


def test_macro_f1_by_hand():
    y = ["a", "a", "b", "c"]
    p = ["a", "b", "b", "b"]
    # a: tp1 fp0 fn1 -> 2/3 ; b: tp1 fp2 fn0 -> 2/4 ; c: tp0 -> 0
    assert macro_f1(y, p) == pytest.approx((2 / 3 + 0.5 + 0.0) / 3)
    # a listed label that never occurs scores 0 and lowers the mean
    assert macro_f1(y, p, labels=["a", "b", "c", "d"]) == pytest.approx((2 / 3 + 0.5) / 4)


def test_ece_by_hand():
    # 2 bins: (0, .5] holds .2 (wrong) and .4 (right): acc .5, conf .3 -> gap .2, weight 2/4
    #         (.5, 1] holds .9 (right) and 1.0 (right): acc 1, conf .95 -> gap .05, weight 2/4
    conf = [0.2, 0.4, 0.9, 1.0]
    ok = [False, True, True, True]
    assert expected_calibration_error(conf, ok, n_bins=2) == pytest.approx(0.5 * 0.2 + 0.5 * 0.05)


def test_ece_perfectly_calibrated_is_zero():
    assert expected_calibration_error([1.0, 1.0], [True, True], n_bins=10) == pytest.approx(0.0)


def test_metric_inputs_checked():
    with pytest.raises(ValueError, match="y_true"):
        accuracy([], [])
    with pytest.raises(ValueError, match="probability"):
        expected_calibration_error([1.5], [True])
