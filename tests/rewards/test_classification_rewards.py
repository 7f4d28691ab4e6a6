"""Classification rewards for the intent classifier: accuracy, macro F1, calibration, custom."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

from rlrouter.rewards.base import RewardConfigError
from rlrouter.rewards.classification import (
    AccuracyReward,
    CalibrationReward,
    CustomReward,
    MacroF1Reward,
    calibration_gaps,
    expected_calibration_error,
    leave_one_out_macro_f1,
    macro_f1,
)


def test_accuracy_normalises_labels_and_skips_unlabeled():
    acc = AccuracyReward()
    out = acc(["q"] * 5, ["x"] * 5, predictions=["Math", "code", " chat ", 3, "math"],
              labels=["math", "code", "chat", "3", None])
    assert out == [1.0, 1.0, 1.0, 1.0, None]
    assert acc.last_metrics == {"reward/accuracy": 1.0}
    assert AccuracyReward(normalize=False)(None, ["x"], predictions=["Math"], labels=["math"]) == [0.0]


def test_accuracy_reads_completions_and_the_label_column():
    assert AccuracyReward()(None, ["math\n", "code"], label=["math", "chat"]) == [1.0, 0.0]
    with pytest.raises(KeyError, match="'labels' \\(or 'label'\\) is missing"):
        AccuracyReward()(None, ["math"])


def test_macro_f1_by_hand():
    # y = a a b c, p = a b b a: F1_a = 2/4, F1_b = 2/3, F1_c = 0 -> (0.5 + 2/3) / 3
    y, p = ["a", "a", "b", "c"], ["a", "b", "b", "a"]
    f1 = (0.5 + 2 / 3) / 3
    assert macro_f1(p, y) == pytest.approx(f1)
    assert macro_f1([], []) == 0.0
    assert macro_f1(["z"], ["a"]) == 0.0  # a predicted-only class counts as 0
    batch = MacroF1Reward()
    assert batch(None, ["x"] * 5, predictions=p + ["a"], labels=y + [None]) == pytest.approx([f1] * 4 + [None])
    assert batch.last_metrics["reward/macro_f1"] == pytest.approx(f1)


def test_macro_f1_leave_one_out_by_hand():
    # without sample 0: y = a b c, p = b b a -> (0 + 2/3 + 0) / 3 = 2/9
    # without sample 1: y = a b c, p = a b a -> (2/3 + 1 + 0) / 3 = 5/9
    # without sample 2: y = a a c, p = a b a -> (1/2 + 0 + 0) / 3 = 1/6
    # without sample 3: y = a a b, p = a b b -> (2/3 + 2/3) / 2 = 2/3
    f1 = (0.5 + 2 / 3) / 3
    loo = MacroF1Reward(mode="leave_one_out")
    out = loo(None, ["x"] * 4, predictions=["a", "b", "b", "a"], labels=["a", "a", "b", "c"])
    assert out == pytest.approx([4 * (f1 - 2 / 9), 4 * (f1 - 5 / 9), 4 * (f1 - 1 / 6), 4 * (f1 - 2 / 3)])
    assert out[0] > 0 and out[2] > 0 and out[1] < 0 and out[3] < 0  # right earns, wrong costs


def test_fast_leave_one_out_matches_recomputing():
    rng = np.random.default_rng(0)
    y = [str(v) for v in rng.integers(0, 5, size=60)]
    p = [str(v) for v in rng.integers(0, 6, size=60)]  # class "5" is never a label
    brute = [macro_f1(p[:i] + p[i + 1:], y[:i] + y[i + 1:]) for i in range(60)]
    assert leave_one_out_macro_f1(p, y) == pytest.approx(brute)
    assert leave_one_out_macro_f1(["a"], ["a"]) == [0.0]


def test_ece_by_hand():
    conf, correct = [0.9, 0.8, 0.3, 0.35], [1, 0, 0, 1]
    # 15 bins (b/15, (b+1)/15]: 0.9 -> 13, 0.8 -> 11, 0.3 -> 4, 0.35 -> 5, each alone in its bin
    assert calibration_gaps(conf, correct) == pytest.approx([0.1, 0.8, 0.3, 0.65])
    assert expected_calibration_error(conf, correct) == pytest.approx((0.1 + 0.8 + 0.3 + 0.65) / 4)
    # 2 bins: 0.9, 0.8 share (0.5, 1] (accuracy 0.5, confidence 0.85); 0.3, 0.35 share (0, 0.5] (0.5, 0.325)
    assert calibration_gaps(conf, correct, n_bins=2) == pytest.approx([0.35, 0.35, 0.175, 0.175])
    assert expected_calibration_error([1.0], [1]) == 0.0  # confidence 1 lands in the last bin
    with pytest.raises(ValueError, match="non-zero length"):
        expected_calibration_error([], [])
    ece = CalibrationReward(mode="ece")
    out = ece(None, ["x"] * 4, predictions=["a", "b", "c", "d"], labels=["a", "x", "x", "d"], confidences=conf)
    assert out == pytest.approx([-0.1, -0.8, -0.3, -0.65])
    assert ece.last_metrics["reward/ece"] == pytest.approx(0.4625)
    assert ece.last_metrics["reward/calibration"] == pytest.approx(-0.4625)


def test_one_copy_of_each_metric():
    from rlrouter.rewards import classification_metrics as metrics
    from rlrouter.rewards import classification

    assert classification.macro_f1 is metrics.macro_f1
    assert classification.expected_calibration_error is metrics.expected_calibration_error
    assert CalibrationReward().n_bins == metrics.DEFAULT_ECE_BINS == 15


def test_brier_rewards_confident_right_and_punishes_confident_wrong():
    brier = CalibrationReward()
    out = brier(None, ["x"] * 5, predictions=["a", "a", "a", "a", "a"], labels=["a", "b", "a", "b", "a"],
                confidences=[1.0, 1.0, 0.9, 0.8, None])
    assert out == pytest.approx([1.0, -1.0, 1 - 2 * 0.01, 1 - 2 * 0.64, None])


def test_calibration_without_confidences_is_not_applicable():
    assert CalibrationReward()(None, ["a", "b"], labels=["a", "b"]) == [None, None]
    with pytest.raises(ValueError, match=r"confidences\[0\] is 1.5"):
        CalibrationReward()(None, ["a"], labels=["a"], confidences=[1.5])
    with pytest.raises(RewardConfigError, match="field 'n_bins'"):
        CalibrationReward(n_bins=0)
    with pytest.raises(RewardConfigError, match="field 'mode'"):
        CalibrationReward(mode="log")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent('''
        def length_penalty(prompts, completions, scale=1.0, **kwargs):
            return [-scale * len(c) for c in completions]

        def label_match(prompts, completions, labels):
            return [float(c == y) for c, y in zip(completions, labels)]

        def broken(prompts, completions, **kwargs):
            return [1.0]

        NOT_CALLABLE = 3
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards"


def test_custom_reward_from_a_dotted_path(user_module):
    r = CustomReward("my_rewards:length_penalty", scale=0.5)
    assert r.__name__ == "length_penalty"
    assert r(None, ["ab", "abcd"], labels=["x", "y"]) == [-1.0, -2.0]
    assert r.last_metrics == {"reward/length_penalty": -1.5}
    # a function without **kwargs gets only the columns it names
    m = CustomReward("my_rewards.label_match", metric_name="match")
    assert m(None, ["a", "b"], labels=["a", "c"], other=[1, 2]) == [1.0, 0.0]
    assert m.__name__ == "match"


def test_custom_reward_errors(user_module):
    with pytest.raises(RewardConfigError, match="cannot import module 'no_such_mod'"):
        CustomReward("no_such_mod:f")
    with pytest.raises(RewardConfigError, match="has no attribute 'nope'"):
        CustomReward("my_rewards:nope")
    with pytest.raises(RewardConfigError, match="is not callable"):
        CustomReward("my_rewards:NOT_CALLABLE")
    with pytest.raises(RewardConfigError, match="field 'fn'"):
        CustomReward("justaname")
    with pytest.raises(RewardConfigError, match="field 'bogus'"):
        CustomReward("my_rewards:label_match", bogus=1)
    with pytest.raises(ValueError, match="returned 1 values for 2 completions"):
        CustomReward("my_rewards:broken")(None, ["a", "b"])
    with pytest.raises(ValueError, match="clash with batch columns"):
        CustomReward("my_rewards:length_penalty", scale=1.0)(None, ["a"], scale=[2.0])
    assert math.isfinite(CustomReward(lambda p, c, **k: [0.0] * len(c))(None, ["a"])[0])
