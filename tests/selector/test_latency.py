"""Latency in the decision: the decaying window (rlrouter.selector.latency), the score penalty and the
``max_ttft_ms`` limit of the selector, and the replay's ``delay_s``."""

from __future__ import annotations

import asyncio

import pytest

from rlrouter.selector import Selector, SelectorConfig
from rlrouter.selector.config import SelectorConfigError
from rlrouter.selector.latency import LatencyWindow
from rlrouter.selector.selector import SelectionRequest, SelectorError

CANDS = ["fast", "slow"]


def test_the_window_is_a_plain_mean_at_first_then_forgets_at_the_half_life():
    w = LatencyWindow()
    assert w.expected() is None
    for t in (1.0, 2.0, 3.0):
        w.observe(t, None, half_life=10)
    assert w.expected() == {"ttft_ms": pytest.approx(2000.0), "total_ms": pytest.approx(2000.0), "calls": 3}
    w = LatencyWindow()
    for _ in range(20):  # past the window's fill (1/n < 1 - 0.5^(1/10) from n = 15)
        w.observe(1.0, None, half_life=10)
    for _ in range(10):  # a half-life of calls at 0 s: the old mean weighs half
        w.observe(0.0, 0.0, half_life=10)
    assert w.expected()["total_ms"] == pytest.approx(500.0)
    w.observe(float("nan"), None, half_life=10)  # not a measurement: ignored
    w.observe(5.0, 0.5, half_life=10)  # streamed: its first token came after 0.5 s
    assert w.expected()["calls"] == 31 and w.expected()["ttft_ms"] < w.expected()["total_ms"]


def _shares(sel: Selector, n: int = 400) -> float:
    return sum(sel.select(SelectionRequest(CANDS)).model == "slow" for _ in range(n)) / n


def test_the_latency_weight_moves_traffic_away_from_a_slow_candidate():
    off = Selector(SelectorConfig(seed=0, cost_awareness=False), CANDS)
    on = Selector(SelectorConfig(seed=0, cost_awareness=False, latency_weight=1.0), CANDS)
    for sel in (off, on):
        for _ in range(5):
            sel.observe_latency("fast", 0.05)
            sel.observe_latency("slow", 0.6)
    share_off, share_on = _shares(off), _shares(on)
    assert 0.4 < share_off < 0.6  # measured, but latency does not enter the score
    # Beta(1, 1) draws, 0.55 apart after the penalty: P(slow wins) = 0.45^2 / 2 ~ 0.10
    assert 0.04 < share_on < 0.17, share_on
    dec = on.select(SelectionRequest(CANDS))
    assert dec.expected_latency["calls"] == 5 and dec.expected_latency["total_ms"] == pytest.approx(
        50.0 if dec.model == "fast" else 600.0)


def test_max_ttft_excludes_a_measured_slow_candidate_while_another_fits():
    sel = Selector(SelectorConfig(seed=0, max_ttft_ms=200), CANDS)
    assert 0 < _shares(sel, 100) < 1  # nothing measured: nothing excluded
    sel.observe_latency("slow", 1.0, ttft_s=0.3)
    assert _shares(sel, 100) == 0.0
    dec = sel.select(SelectionRequest(CANDS))
    assert dec.detail["over_max_ttft"] == ["slow"]
    sel.observe_latency("fast", 0.5)  # now neither fits: both are considered, and the answer says so
    dec = sel.select(SelectionRequest(CANDS))
    assert "no candidate within max_ttft_ms=200" in dec.detail["latency_limit"]
    with pytest.raises(SelectorError, match="unknown candidate"):
        sel.observe_latency("nobody", 0.1)
    for bad in ({"latency_weight": -1}, {"max_ttft_ms": 0}, {"latency_half_life": 0}):
        with pytest.raises(SelectorConfigError) as e:
            SelectorConfig.from_dict(bad)
        assert e.value.field == next(iter(bad))


def test_a_replay_with_delay_s_answers_that_much_later(shared_data):
    from rlrouter.pool.base import Candidate
    from rlrouter.pool.options import OptionError
    from rlrouter.pool.replay import ReplayBackend

    b = ReplayBackend(Candidate("gpt-4-1106-preview", 10.0, 30.0, options={"delay_s": 0.2}))
    prompt = b.table.prompts[0]
    r = asyncio.run(b.generate([prompt]))[0]
    assert r.ok and r.latency_s >= 0.2
    with pytest.raises(OptionError) as e:
        ReplayBackend(Candidate("gpt-4-1106-preview", 10.0, 30.0, options={"delay_s": -1}))
    assert e.value.field == "delay_s"
