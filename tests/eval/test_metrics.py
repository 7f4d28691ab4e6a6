"""APGR, CPT, AIQ and the replay metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlrouter.eval.metrics import (
    aiq,
    apgr,
    call_shares,
    calls_cost,
    cpt,
    evaluate_decisions,
    nondecreasing_convex_hull,
    pgr,
    pooled_weak_split,
    random_quality_at_cost,
    summarize,
    threshold_sweep,
    weak_split,
)

# A toy curve: 0%, 50%, 100% strong calls with quality 0.6, 0.85, 0.9; weak 0.6, strong 0.9.
SHARE = np.array([0.0, 0.5, 1.0])
QUAL = np.array([0.6, 0.85, 0.9])


def test_pgr_by_hand():
    assert pgr(0.75, 0.6, 0.9) == pytest.approx(0.5)
    assert pgr(0.9, 0.6, 0.9) == pytest.approx(1.0)
    assert math.isnan(pgr(0.7, 0.7, 0.7))


def test_apgr_on_toy_curve():
    # AUC = 0.5 * (0.6 + 0.85) / 2 + 0.5 * (0.85 + 0.9) / 2 = 0.3625 + 0.4375 = 0.8
    # APGR = (0.8 - 0.6) / (0.9 - 0.6) = 2/3; equally the mean of PGR = 0, 5/6, 1 by trapezoids
    assert apgr(SHARE, QUAL, 0.6, 0.9) == pytest.approx(2 / 3)
    # order of the points does not matter
    assert apgr(SHARE[::-1], QUAL[::-1], 0.6, 0.9) == pytest.approx(2 / 3)


def test_apgr_of_random_line_is_half_and_of_partial_range_uses_same_range():
    assert apgr(np.array([0.0, 1.0]), np.array([0.6, 0.9]), 0.6, 0.9) == pytest.approx(0.5)
    # RouteLLM integrates weak and strong over the same x points: a curve on [0.2, 0.6] at PGR 1
    assert apgr(np.array([0.2, 0.6]), np.array([0.9, 0.9]), 0.6, 0.9) == pytest.approx(1.0)
    assert math.isnan(apgr(SHARE, QUAL, 0.7, 0.7))


def test_cpt_on_toy_curve():
    # 50%: target 0.75 lies between (0, 0.6) and (0.5, 0.85): 0.5 * 0.15 / 0.25 = 0.3
    assert cpt(SHARE, QUAL, 0.6, 0.9, 0.5) == pytest.approx(0.3)
    # 80%: target 0.84: 0.5 * 0.24 / 0.25 = 0.48
    assert cpt(SHARE, QUAL, 0.6, 0.9, 0.8) == pytest.approx(0.48)
    # 100%: target 0.9 first reached at the last point
    assert cpt(SHARE, QUAL, 0.6, 0.9, 1.0) == pytest.approx(1.0)
    # never reached
    assert math.isnan(cpt(np.array([0.0, 1.0]), np.array([0.6, 0.7]), 0.6, 0.9, 0.5))


def test_cpt_takes_first_crossing_on_non_monotone_curve():
    share = np.array([0.0, 0.25, 0.5, 1.0])
    qual = np.array([0.6, 0.8, 0.7, 0.9])
    # target 0.75 first crossed between (0, 0.6) and (0.25, 0.8): 0.25 * 0.15 / 0.2 = 0.1875
    assert cpt(share, qual, 0.6, 0.9, 0.5) == pytest.approx(0.1875)


def test_nondecreasing_convex_hull_by_hand():
    cost = np.array([1.0, 2.0, 3.0, 4.0])
    qual = np.array([0.5, 0.6, 0.9, 0.85])
    hc, hq = nondecreasing_convex_hull(cost, qual)
    # (2, 0.6) lies under the chord (1, 0.5)-(3, 0.9); (4, 0.85) is after the maximum
    assert hc.tolist() == [1.0, 3.0]
    assert hq.tolist() == [0.5, 0.9]


def test_aiq_on_toy_curve():
    cost = np.array([1.0, 2.0, 3.0, 4.0])
    qual = np.array([0.5, 0.6, 0.9, 0.85])
    # over [1, 4]: (0.5 + 0.9) / 2 * 2 + 0.9 * 1 = 2.3 -> 2.3 / 3
    assert aiq(cost, qual) == pytest.approx(2.3 / 3)
    # over [0, 4]: nothing is reachable below cost 1 -> 2.3 / 4
    assert aiq(cost, qual, 0.0, 4.0) == pytest.approx(2.3 / 4)
    # over [2, 3]: hull is 0.7 at 2 and 0.9 at 3 -> 0.8
    assert aiq(cost, qual, 2.0, 3.0) == pytest.approx(0.8)


def test_aiq_of_a_straight_line_is_its_mean():
    assert aiq(np.array([0.0, 10.0]), np.array([0.2, 0.8])) == pytest.approx(0.5)


def test_evaluate_decisions_and_shares():
    scores = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    costs = np.array([[1.0, 10.0]] * 4)
    p = evaluate_decisions(scores, costs, np.array([0, 1, 1, 0]))
    assert p.quality == pytest.approx(0.25 * (1 + 1 + 0 + 0))
    assert p.cost_total == pytest.approx(22.0)
    assert p.cost_mean == pytest.approx(5.5)
    assert p.shares == (0.5, 0.5)
    assert call_shares(np.array([2, 2, 0]), 3).tolist() == pytest.approx([1 / 3, 0, 2 / 3])
    with pytest.raises(ValueError, match="decisions"):
        call_shares(np.array([3]), 3)


def test_threshold_sweep_matches_routellm_quantile_bins():
    scores = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    costs = np.array([[1.0, 3.0]] * 4)
    s = np.array([0.9, 0.8, 0.2, 0.1])  # the router ranks the two prompts that need strong first
    c = threshold_sweep(s, scores, costs, weak=0, strong=1, num_thresholds=4)
    assert c.strong_share.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert c.quality.tolist() == pytest.approx([0.5, 0.75, 1.0, 1.0, 0.75])
    assert c.cost_mean.tolist() == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0])
    assert apgr(c.strong_share, c.quality, 0.5, 0.75) > 1.0  # better than always-strong in between


def test_random_quality_at_cost_and_summarize():
    assert random_quality_at_cost(5.5, (0.6, 1.0), (0.9, 10.0)) == pytest.approx(0.75)
    assert random_quality_at_cost(100.0, (0.6, 1.0), (0.9, 10.0)) == pytest.approx(0.9)
    scores = np.array([[0.0, 1.0], [1.0, 1.0]])
    costs = np.array([[1.0, 3.0]] * 2)
    point = evaluate_decisions(scores, costs, np.array([1, 0]))
    m = summarize("r", point, weak=(0.5, 1.0), strong=(1.0, 3.0))
    assert m.pgr == pytest.approx(1.0) and m.apgr is None and m.aiq is None


def test_weak_split_and_its_pooled_interval_by_hand():
    """Weak (column 0) right on prompts 0, 1, 3; the router keeps 0, 1, 2 on weak, sends 3, 4 to strong and 5 to a
    third candidate: kept 2/3, sent 1/2, prompt 5 in neither."""
    scores = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 1, 1], [0, 1, 0], [0, 0, 1]], dtype=float)
    split = weak_split(scores, np.array([0, 0, 0, 1, 1, 2]), weak=0, strong=1)
    assert split == {"kept": {"n": 3, "weak_quality": pytest.approx(2 / 3)}, "sent": {"n": 2, "weak_quality": 0.5}}
    # pooled with a second set (kept 1/1, sent 0/2): kept 3/4, sent 1/4
    other = weak_split(np.array([[1, 0], [0, 1], [0, 1]], dtype=float), np.array([0, 1, 1]), weak=0, strong=1)
    p = pooled_weak_split([split, other])
    se = math.sqrt(0.75 * 0.25 / 4 + 0.25 * 0.75 / 4)
    assert (p["n_kept"], p["n_sent"]) == (4, 4)
    assert p["value"] == pytest.approx(0.5) and p["lo"] == pytest.approx(0.5 - 1.96 * se)
    assert p["hi"] == pytest.approx(0.5 + 1.96 * se)
    # a router that sends nothing: no sent side, no difference
    none_sent = weak_split(scores, np.zeros(6, dtype=int), weak=0, strong=1)
    assert none_sent["sent"] == {"n": 0, "weak_quality": None}
    assert pooled_weak_split([none_sent])["value"] is None
    with pytest.raises(ValueError, match="expected shape"):
        weak_split(scores, np.zeros(5, dtype=int), weak=0, strong=1)


def test_calls_cost_prices_every_call_by_hand():
    """Prompt 0 paid weak then strong (1 + 30), prompt 1 strong only (20), prompt 2 weak twice (2 + 2)."""
    costs = np.array([[1.0, 30.0], [3.0, 20.0], [2.0, 40.0]])
    assert calls_cost(costs, [[0, 1], [1], [0, 0]]).tolist() == [31.0, 20.0, 4.0]
    assert calls_cost(costs, [[], [], []]).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="one list per prompt"):
        calls_cost(costs, [[0]])
    with pytest.raises(ValueError, match=r"calls\[1\]: candidate indices \[2\] outside 0..1"):
        calls_cost(costs, [[0], [2], [1]])
