"""Adapters of trained routers: the bandit selector and intent classifier + category map."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from rlrouter.routers.adapters import CategoryMapRouter, SelectorRouter
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, build_router
from rlrouter.pool.base import Candidate

CANDS = [Candidate("weak", 0.6, 0.6), Candidate("strong", 10.0, 30.0)]


def make_set(prompts: list[str], scores: np.ndarray) -> EvalSet:
    n = len(prompts)
    return EvalSet(prompts=prompts, candidates=CANDS, scores=scores, costs=np.tile([1.0, 10.0], (n, 1)),
                   sources=["t"] * n, prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def category_of(prompts):
    return ["math" if p.startswith("m") else "trivia" if p.startswith("t") else "other" for p in prompts]


def test_cost_aware_category_map_trades_loss_for_price_and_sweeps_with_lam():
    from rlrouter.routers.adapters import CostAwareCategoryRouter

    prompts = ["m1", "m2", "m3", "m4", "t1", "t2", "t3", "t4"]
    # math: weak 0.25, strong 1.0 (loss 0.75); trivia: weak 0.75, strong 1.0 (loss 0.25)
    scores = np.array([[0, 1], [0, 1], [0, 1], [1, 1], [1, 1], [1, 1], [1, 1], [0, 1]], dtype=float)
    r = CostAwareCategoryRouter("intent", category_of, default=1, weak=0, strong=1, lam=0.0)
    r.fit(make_set(prompts, scores))
    # costs 1 and 10 USD per prompt -> 9,000 USD saved per 1,000 prompts
    assert r.score_of == pytest.approx({"math": 0.75 / 9000, "trivia": 0.25 / 9000})
    assert r.category_map == {"math": 1, "trivia": 1}  # lam 0: no saving is worth any loss
    r.threshold = 0.5 / 9000  # trivia loses 0.25 < lam x 9000 = 0.5: weak; math does not
    assert r.category_map == {"math": 1, "trivia": 0}
    assert r.decide(["m9", "t9", "x9"]).tolist() == [1, 0, 1]  # unknown category -> default (strong)
    r.threshold = 1.0
    assert r.decide(["m9", "t9"]).tolist() == [0, 0]
    # as a threshold router the job can calibrate it to a strong share: half of these prompts are math
    r.calibrate(["m1", "m2", "t1", "t2"], 0.5)
    assert r.decide(["m1", "m2", "t1", "t2"]).tolist() == [1, 1, 0, 0]
    # the same threshold from scores the caller already has (the job scores a slow router once)
    t = r.threshold
    assert r.calibrate(["m1", "m2", "t1", "t2"], 0.5, scores=r.strong_score(["m1", "m2", "t1", "t2"])) == t
    with pytest.raises(ValueError, match="intent: calibrate got 3 scores for 4 prompts"):
        r.calibrate(["m1", "m2", "t1", "t2"], 0.5, scores=np.zeros(3))


def test_intent_router_from_config_with_classifier_path(monkeypatch):
    mod = types.ModuleType("fake_intent_plugin")
    mod.classify = category_of
    monkeypatch.setitem(sys.modules, "fake_intent_plugin", mod)
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1,
                        train=make_set(["m1"], np.array([[0.0, 1.0]])), embed=lambda t: np.zeros((len(t), 2)))
    r = build_router({"type": "intent", "classifier": "fake_intent_plugin:classify",
                      "category_map": {"math": "strong", "trivia": "weak"}, "default": "weak"}, ctx)
    assert r.decide(["m", "t", "o"]).tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="checkpoint"):
        build_router({"type": "intent"}, ctx)
    with pytest.raises(ValueError, match="'tolerance' was replaced by the cost-aware 'lam'"):
        build_router({"type": "intent", "classifier": "fake_intent_plugin:classify", "tolerance": 0.02}, ctx)
    auto = build_router({"type": "intent", "classifier": "fake_intent_plugin:classify", "lam": 0.1}, ctx)
    assert auto.threshold == 0.1


def test_selector_warmup_learns_the_better_candidate_from_bandit_feedback():
    n = 300
    prompts = [f"q{i}" for i in range(n)]
    scores = np.tile([0.0, 1.0], (n, 1))  # strong always right, weak always wrong
    r = SelectorRouter("selector", ["weak", "strong"], {"cost_awareness": False, "enable_personalization": False},
                       embed=None, seed=0)
    r.fit(make_set(prompts, scores))
    assert r.warmup_reward > 0.8  # it learned while exploring, from its own choices only
    assert r.decide([f"t{i}" for i in range(100)]).mean() > 0.9
    assert not r.selector.state.pending  # evaluation decisions are not left pending


def test_contextual_selector_learns_per_prompt_group():
    rng = np.random.default_rng(0)
    n = 400
    group = rng.integers(0, 2, size=n)
    prompts = [f"g{g}-{i}" for i, g in enumerate(group)]

    def embed(texts):
        g = np.array([int(t[1]) for t in texts])
        return np.eye(2)[g] + 0.05 * rng.normal(size=(len(texts), 2))

    # group 0 needs strong; group 1: weak is right and strong wrong
    scores = np.where(group[:, None] == 0, [[0.0, 1.0]], [[1.0, 0.0]])
    r = SelectorRouter("selector", ["weak", "strong"], {"use_contextual": True, "cost_awareness": False,
                                                        "enable_personalization": False}, embed=embed, seed=1)
    r.fit(make_set(prompts, scores.astype(float)))
    test = [f"g0-t{i}" for i in range(50)] + [f"g1-t{i}" for i in range(50)]
    d = r.decide(test)
    assert d[:50].mean() > 0.9 and d[50:].mean() < 0.1


def test_online_selector_keeps_learning_on_the_test_stream_and_reports_regret():
    from rlrouter.eval.job import online_regret

    n = 300
    # a short warm-up where weak is right half the time and strong always
    warm = make_set([f"w{i}" for i in range(8)], np.array([[i % 2, 1.0] for i in range(8)], dtype=float))
    test = make_set([f"t{i}" for i in range(n)], np.tile([1.0, 1.0], (n, 1)))  # test: both right, weak cheaper
    cfg = {"cost_awareness": True, "cost_weight": 0.2, "enable_personalization": False}
    frozen = SelectorRouter("frozen", ["weak", "strong"], cfg, embed=None, seed=0, prices={"weak": 0.6, "strong": 10.0})
    online = SelectorRouter("online", ["weak", "strong"], cfg, embed=None, seed=0, prices={"weak": 0.6, "strong": 10.0},
                            online=True)
    for r in (frozen, online):
        r.fit(warm)
    dec = {"frozen": frozen.replay(test), "online": online.replay(test), "always_weak": np.zeros(n, dtype=np.int64)}
    # learning from the stream, the online selector moves to the candidate that is as good and cheaper
    late = dec["online"][online.stream_order[-100:]].mean()
    assert late < 0.3 and late < dec["frozen"].mean()
    rep = online_regret(online, test, dec, "online")
    assert rep["best_fixed_candidate"] == "always weak" and rep["best_fixed_router"] in ("always weak", "always_weak")
    # objective: weak earns 1.2 (cost bonus), strong 1.0; regret = 0.2 x the online selector's strong calls
    assert rep["regret_vs_best_candidate"] == pytest.approx(0.2 * dec["online"].sum())
    assert rep["regret_curve"]["vs_best_router"][-1] == pytest.approx(rep["regret_vs_best_router"])
