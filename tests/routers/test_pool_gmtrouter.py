"""The ``gmtrouter`` pool router (GMTRouter trained in-process over N candidates) on a small hand-made table:
one candidate right on arithmetic questions, another on history questions, a third never right. Pure logic:
a bag-of-words stand-in for MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.routers.pool_routers import GMTPoolRouter, build_pool_router
from rlrouter.routers.reader import EvalSet
from rlrouter.pool.base import Candidate

NAMES = ["m0", "m1", "m2"]
COSTS = [1e-4, 1e-3, 1e-2]


def _embed(texts):
    """Arithmetic, history or a candidate's description (``graph.describe_llm``: "Large language model m0."),
    plus a little per-text jitter."""
    out = []
    for t in texts:
        kind = [1.0, 0.0] if "sum" in t else [0.0, 1.0] if "war" in t else [0.0, 0.0]
        who = [1.0 if t.endswith(f" {n}.") else 0.0 for n in NAMES]
        jitter = np.random.default_rng(sum(t.encode())).normal(scale=0.1, size=3)
        out.append(np.concatenate([kind, who, jitter]))
    out = np.asarray(out, dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _table(n: int, start: int = 0) -> EvalSet:
    """n prompts, alternating kinds: m0 right on the sums, m1 on the wars, m2 never; two tasks across kinds."""
    prompts, scores, tasks = [], [], []
    for i in range(start, start + n):
        arithmetic = i % 2 == 0
        prompts.append(f"what is the sum of {i} and {i + 3}" if arithmetic else f"when did the war number {i} end")
        scores.append([1.0, 0.0, 0.0] if arithmetic else [0.0, 1.0, 0.0])
        tasks.append("a" if i % 4 < 2 else "b")
    scores, costs = np.asarray(scores), np.tile(COSTS, (n, 1))
    return EvalSet(prompts=prompts, candidates=[Candidate(name=c, price_in=0.0, price_out=0.0, backend="replay")
                                                for c in NAMES],
                   scores=scores, costs=costs, sources=tasks, prompt_tokens=np.ones(n, int),
                   completion_tokens=np.ones((n, 3), int))


def test_gmtrouter_predicts_the_right_candidate_higher_on_held_out_prompts_of_each_kind():
    train, test = _table(40), _table(12, start=100)
    r = build_pool_router("gmt", {"type": "gmtrouter", "hidden_dim": 16, "epochs": 60, "lr": 1e-2, "eval_every": 5,
                                  "patience": 20, "dropout": 0.0, "cost_k": 3}, _embed)
    assert isinstance(r, GMTPoolRouter) and r.name == "gmt"
    r.fit(train)
    assert r.scorer.llms == NAMES and r.fit_result.best_val["cold_auc"] > 0.9
    q, c = r.predict(test)
    assert q.shape == c.shape == (12, 3) and ((q > 0) & (q < 1)).all()
    arithmetic = np.arange(100, 112) % 2 == 0
    assert (q[arithmetic, 0] > q[arithmetic, 1]).all() and (q[~arithmetic, 1] > q[~arithmetic, 0]).all()
    assert (q[:, 2] < q.max(axis=1)).all()  # the candidate never right is never the best
    assert c[0].tolist() == pytest.approx(COSTS)  # the neighbours' costs, as mf's
    # a unit of quality worth a dollar: each prompt goes to the candidate right on its kind
    d = r.sweep(test, np.array([1.0])).decisions[0]
    assert (d[arithmetic] == 0).all() and (d[~arithmetic] == 1).all()


def test_gmtrouter_config_errors_name_the_router_and_the_field():
    with pytest.raises(ValueError, match=r"eval.routers.g: .*unexpected keyword argument 'hiden_dim'"):
        build_pool_router("g", {"type": "gmtrouter", "hiden_dim": 8}, _embed)
    with pytest.raises(ValueError, match=r"gmtrouter.hidden_dim: 30 is not divisible by heads=4"):
        build_pool_router("g", {"type": "gmtrouter", "hidden_dim": 30}, _embed)
    with pytest.raises(ValueError, match=r"gmtrouter.epochs: expected >= 1"):
        build_pool_router("g", {"type": "gmtrouter", "epochs": 0}, _embed)
    with pytest.raises(ValueError, match=r"gmtrouter.val_frac: must be in \[0, 1\)"):
        build_pool_router("g", {"type": "gmtrouter", "val_frac": 1.0}, _embed)
    with pytest.raises(RuntimeError, match="fit"):
        GMTPoolRouter(_embed).predict(_table(2))
