"""Baselines (oracle, random, kNN, MF) and the router registry."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from rlrouter.routers import adapters, baselines  # noqa: F401 - register the router types
from rlrouter.routers.baselines import KNNRouter, MFRouter, RandomRouter, oracle_curve, oracle_decisions
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, build_router, registered_types
from rlrouter.pool.base import Candidate

CANDS = [Candidate("weak", 0.6, 0.6), Candidate("strong", 10.0, 30.0)]


def make_set(prompts: list[str], scores: np.ndarray, costs: np.ndarray | None = None) -> EvalSet:
    n = len(prompts)
    costs = np.tile([1.0, 10.0], (n, 1)) if costs is None else costs
    return EvalSet(prompts=prompts, candidates=CANDS, scores=scores, costs=costs, sources=["t"] * n,
                   prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_oracle_picks_cheapest_best_candidate():
    scores = np.array([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    costs = np.tile([1.0, 10.0], (4, 1))
    assert oracle_decisions(scores, costs).tolist() == [0, 1, 0, 0]
    # optimal curve: only row 1 gains from strong (+1); base weak quality is 2/4
    curve = oracle_curve(scores, costs, weak=0, strong=1, shares=np.array([0.0, 0.25, 0.5, 1.0]))
    assert curve.tolist() == pytest.approx([0.5, 0.75, 0.75, 0.75])


def test_random_router_is_deterministic_per_prompt_and_hits_its_share():
    r = RandomRouter("random", weak=0, strong=1, p_strong=0.3, seed=7)
    prompts = [f"q{i}" for i in range(4000)]
    d = r.decide(prompts)
    assert d.mean() == pytest.approx(0.3, abs=0.03)
    assert r.decide(prompts[::-1]).tolist() == d[::-1].tolist()
    assert RandomRouter("random", 0, 1, 0.3, seed=8).decide(prompts).tolist() != d.tolist()


def test_knn_scores_are_mean_gain_of_nearest_training_prompts():
    vecs = {"a1": [1, 0], "a2": [0.9, 0.1], "b1": [0, 1], "b2": [0.1, 0.9], "qa": [1, 0.05], "qb": [0.05, 1]}

    def embed(texts):
        v = np.array([vecs[t] for t in texts], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    # a-prompts: strong right, weak wrong (gain 1) and tie (gain 0); b-prompts: weak right, strong wrong (gain -1)
    train = make_set(["a1", "a2", "b1", "b2"], np.array([[0, 1], [1, 1], [1, 0], [1, 0]], dtype=float))
    r = KNNRouter("knn", weak=0, strong=1, embed=embed, k=2)
    r.fit(train)
    assert r.strong_score(["qa", "qb"]).tolist() == pytest.approx([0.5, -1.0])
    r.threshold = 0.25
    assert r.decide(["qa", "qb"]).tolist() == [1, 0]


def test_mf_learns_which_prompts_need_the_strong_candidate():
    rng = np.random.default_rng(0)
    n = 400
    group = rng.integers(0, 2, size=n)
    emb = np.concatenate([np.eye(2)[group] * 2.0 + 0.1 * rng.normal(size=(n, 2)), rng.normal(size=(n, 6)) * 0.1], 1)
    prompts = [f"p{i}" for i in range(n)]
    table = dict(zip(prompts, emb.astype(np.float32)))

    def embed(texts):
        return np.stack([table[t] for t in texts])

    # group 1: strong wins; group 0: tie (both right)
    scores = np.where(group[:, None] == 1, [[0.0, 1.0]], [[1.0, 1.0]])
    r = MFRouter("mf", weak=0, strong=1, embed=embed, num_candidates=2, dim=8, epochs=30, lr=0.05, batch_size=64)
    r.fit(make_set(prompts, scores.astype(float)))
    s = r.strong_score(prompts)
    assert s[group == 1].mean() > 0.8 and abs(s[group == 0].mean() - 0.5) < 0.15
    assert r.train_loss[-1] < r.train_loss[0]
    rows, a, b, y = r.pairs(make_set(prompts, scores.astype(float)))
    assert len(rows) == n and set(np.unique(y).tolist()) == {0.0, 0.5}  # ties kept as 0.5 ("half")


def test_knn_and_mf_end_to_end_on_real_prompts_and_minilm(shared_data):
    """Real RouteLLM outcomes, real MiniLM embeddings (a few hundred prompts)."""
    from rlrouter.embeddings import embed_texts
    from rlrouter.routers.reader import read_eval_set

    prices = {"gpt-4-1106-preview": {"input": 10, "output": 30},
              "mistralai/Mixtral-8x7B-Instruct-v0.1": {"input": 0.6, "output": 0.6}}
    es = read_eval_set(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv", prices=prices)
    es = es.subset(np.arange(240))
    train, test = es.subset(np.arange(200)), es.subset(np.arange(200, 240))
    weak, strong = es.index("mistralai/Mixtral-8x7B-Instruct-v0.1"), es.index("gpt-4-1106-preview")
    ctx = RouterContext(candidates=es.names, weak=weak, strong=strong, train=train, embed=embed_texts)
    for spec in ({"type": "knn", "k": 10}, {"type": "mf", "dim": 16, "epochs": 5}):
        r = build_router(spec, ctx)
        r.fit(train)
        s = r.strong_score(test.prompts)
        assert s.shape == (40,) and np.isfinite(s).all() and s.std() > 0, spec
        assert set(r.decide(test.prompts).tolist()) <= {weak, strong}


def test_registry_errors_name_the_problem():
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1,
                        train=make_set(["x"], np.array([[1.0, 0.0]])), embed=lambda t: np.zeros((len(t), 2)))
    assert {"always", "random", "knn", "mf", "selector", "intent", "router_r1", "gmtrouter"} <= set(registered_types())
    with pytest.raises(ValueError, match="unknown 'nope'.*registered types"):
        build_router({"type": "nope"}, ctx)
    with pytest.raises(ValueError, match="gmtrouter.*checkpoint is required"):
        build_router({"type": "gmtrouter"}, ctx)
    with pytest.raises(ValueError, match="router_r1.*checkpoint is required"):
        build_router({"type": "router_r1"}, ctx)
    with pytest.raises(ValueError, match="unknown fields \\['kk'\\]"):
        build_router({"type": "knn", "kk": 3}, ctx)
    with pytest.raises(ValueError, match="'medium' is not 'strong', 'weak'"):
        build_router({"type": "always", "candidate": "medium"}, ctx)
    r = build_router({"type": "always", "candidate": "strong", "name": "gpt"}, ctx)
    assert r.name == "gpt" and r.decide(["a", "b"]).tolist() == [1, 1]


def test_router_type_by_import_path(monkeypatch):
    class Const(Router):
        def decide(self, prompts):
            return np.zeros(len(prompts), dtype=np.int64)

    mod = types.ModuleType("fake_router_plugin")
    mod.build = lambda cfg, ctx: Const()
    mod.bad = lambda cfg, ctx: "not a router"
    monkeypatch.setitem(sys.modules, "fake_router_plugin", mod)
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1,
                        train=make_set(["x"], np.array([[1.0, 0.0]])), embed=lambda t: np.zeros((len(t), 2)))
    r = build_router({"type": "fake_router_plugin:build", "name": "plug"}, ctx)
    assert r.name == "plug" and r.decide(["a"]).tolist() == [0]
    with pytest.raises(TypeError, match="not a Router"):
        build_router({"type": "fake_router_plugin:bad"}, ctx)


def test_subject_gain_scores_give_each_prompt_its_subjects_mean_gain():
    from rlrouter.routers.baselines import subject_gain_scores

    scores = np.array([[1, 1], [0, 1], [1, 0], [0, 0], [0, 1]], dtype=float)  # (weak, strong)
    s = subject_gain_scores(["a", "a", "b", "b", "b"], scores, weak=0, strong=1)
    assert s.tolist() == pytest.approx([0.5, 0.5, 0.0, 0.0, 0.0])
