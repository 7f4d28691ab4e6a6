"""The TRL reward contract and the weighted combiner."""

from __future__ import annotations

import math

import pytest

from rlrouter.rewards import CombinedReward, RewardConfigError, RewardFunction


def const(values, name):
    def fn(prompts, completions, **kwargs):
        return list(values)

    fn.__name__ = name
    return fn


def test_weighted_sum_skips_none_and_all_none_is_none():
    a = const([1.0, None, 0.5, None], "a")
    b = const([2.0, 3.0, None, None], "b")
    combined = CombinedReward([a, b], weights=[0.5, 2.0])
    out = combined(["p"] * 4, ["c"] * 4)
    assert out == [0.5 + 4.0, 6.0, 0.25, None]
    assert combined.last_metrics == {"reward/a": 0.75, "reward/b": 2.5,
                                     "reward/total": pytest.approx((4.5 + 6 + 0.25) / 3)}
    assert isinstance(combined, RewardFunction)


def test_columns_reach_every_function_and_names_are_unique():
    seen = []

    def spy(prompts, completions, **kwargs):
        seen.append(sorted(kwargs))
        return [0.0] * len(completions)

    combined = CombinedReward([spy, spy])
    combined(["p"], ["c"], ground_truth=["x"], extra=[1])
    assert seen == [["extra", "ground_truth"]] * 2
    assert combined.names == ["spy_0", "spy_1"]


def test_bad_outputs_name_the_function():
    with pytest.raises(ValueError, match="reward 'short' returned 1 values for 2 completions"):
        CombinedReward([const([1.0], "short")])(["p", "q"], ["c", "d"])
    with pytest.raises(ValueError, match=r"reward 'nan' value \[0\] is nan"):
        CombinedReward([const([math.nan], "nan")])(["p"], ["c"])
    with pytest.raises(TypeError, match=r"reward 'txt' value \[0\] is str"):
        CombinedReward([const(["1"], "txt")])(["p"], ["c"])


def test_config_errors():
    with pytest.raises(RewardConfigError, match="field 'functions'"):
        CombinedReward([])
    with pytest.raises(RewardConfigError, match="field 'weights'"):
        CombinedReward([const([1.0], "a")], weights=[1.0, 2.0])
    with pytest.raises(RewardConfigError, match=r"field 'weights\[0\]'"):
        CombinedReward([const([1.0], "a")], weights=[math.inf])
    with pytest.raises(RewardConfigError, match=r"field 'functions\[0\]'"):
        CombinedReward(["not callable"])


def test_bools_read_as_zero_or_one_and_numpy_floats_pass():
    import numpy as np

    combined = CombinedReward([const([True, False], "b"), const([np.float32(0.5), None], "n")])
    assert combined(["p", "q"], ["c", "d"]) == [1.5, 0.0]
