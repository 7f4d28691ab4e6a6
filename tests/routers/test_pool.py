"""Routing over N candidates: willingness-to-pay routing, AIQ per task against hand-computed hulls, the
paired bootstrap, and every pool router on a small hand-made table."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.routers.pool_routers import (CascadeRouter, EscalateRouter, JudgeCascadeRouter, KNNPoolRouter, MFPoolRouter,
                                        MLPPoolRouter, OracleRouter, PerTaskRouter, SelectorPoolRouter, build_pool_router,
                                        hull_chain, reply_key)
from rlrouter.routers.reader import EvalSet
from rlrouter.eval.wtp import (Sweep, aiq_by_task, aiq_minus_reference, cost_ranges, fixed_sweep, route_by_wtp,
                               wtp_grid)
from rlrouter.pool.base import Candidate


def _es(scores, costs, tasks, prompts=None, responses=None) -> EvalSet:
    scores, costs = np.asarray(scores, float), np.asarray(costs, float)
    n, m = scores.shape
    names = [f"m{j}" for j in range(m)]
    return EvalSet(prompts=prompts or [f"q{i}" for i in range(n)],
                   candidates=[Candidate(name=c, price_in=0.0, price_out=0.0, backend="replay") for c in names],
                   scores=scores, costs=costs, sources=list(tasks), prompt_tokens=np.ones(n, int),
                   completion_tokens=np.ones((n, m), int), responses=responses)


def test_route_by_wtp_cheapest_at_zero_best_when_quality_is_worth_it_ties_to_cheaper():
    q = np.array([[0.2, 0.9, 0.9], [0.5, 0.5, 0.4]])
    c = np.array([[1.0, 3.0, 2.0], [1.0, 2.0, 0.5]])
    assert route_by_wtp(q, c, 0.0).tolist() == [0, 2]
    # w = 10: values [1, 6, 7] and [4, 3, 3.5]
    assert route_by_wtp(q, c, 10.0).tolist() == [2, 0]
    # equal value: the cheaper candidate (row 0: w = 2.5 gives 0.5 - 1 = -0.5 and 2.25 - 3 = -0.75, 2.25 - 2 = 0.25)
    assert route_by_wtp(np.array([[0.5, 0.5]]), np.array([[2.0, 1.0]]), 1.0).tolist() == [1]


def test_wtp_grid_spans_the_costs_and_holds_the_price_weights():
    ws = wtp_grid(np.array([1e-4, 5e-3]), num=10, lams=[0.1])
    assert ws[0] == 0.0 and ws[1] == pytest.approx(1e-6) and ws[-1] == pytest.approx(0.5)
    assert np.any(np.isclose(ws, 1.0 / 100.0))  # lam 0.1 -> w = 1 / (1000 * 0.1)
    assert np.all(np.diff(ws) > 0)


def test_aiq_by_task_against_hand_computed_hulls():
    # task a: two prompts, candidates cost 1 and 3 (means), qualities 0.5 and 1.0
    # task b: one prompt, costs 2 and 4, qualities 0 and 1
    scores = [[1, 1], [0, 1], [0, 1]]
    costs = [[1, 3], [1, 3], [2, 4]]
    es = _es(scores, costs, ["a", "a", "b"])
    ranges = cost_ranges(es.scores, es.costs, es.tasks, "models")
    assert ranges == {"a": (1.0, 3.0), "b": (2.0, 4.0)}
    zero = fixed_sweep(es.scores, es.costs, es.names)
    got = aiq_by_task(zero, es.tasks, ranges)
    # a: hull from (1, .5) to (3, 1): mean of a line = .75; b: (2, 0) to (4, 1): .5; overall mean .625
    assert got["a"] == pytest.approx(0.75) and got["b"] == pytest.approx(0.5) and got["overall"] == pytest.approx(0.625)
    # a router that sends prompt 0 to m0 and prompt 1 to m1 reaches quality 1 at mean cost 2 on task a:
    # hull (1, .5) -> (2, 1) -> flat: area .75 * 1 + 1 * 1 = 1.75 over width 2 = .875
    router = Sweep.from_decisions(np.array([[0, 0, 0], [0, 1, 0], [1, 1, 1]]), es.scores, es.costs, ["lo", "mix", "hi"])
    got = aiq_by_task(router, es.tasks, ranges)
    assert got["a"] == pytest.approx(0.875) and got["b"] == pytest.approx(0.5)
    # RouterBench's convention: from cost 0 (the hull is 0 left of its cheapest point) to the dearest model
    rb = cost_ranges(es.scores, es.costs, es.tasks)
    assert rb == {"a": (0.0, 3.0), "b": (0.0, 4.0)}
    zero_rb = aiq_by_task(zero, es.tasks, rb)  # a: 1.5 / 3; b: 1 / 4
    assert zero_rb["a"] == pytest.approx(0.5) and zero_rb["b"] == pytest.approx(0.25)
    assert aiq_by_task(router, es.tasks, rb)["a"] == pytest.approx(1.75 / 3)
    with pytest.raises(ValueError, match="eval.aiq_range"):
        cost_ranges(es.scores, es.costs, es.tasks, "wide")


def test_sweep_paid_cost_overrides_the_answer_cost():
    es = _es([[1, 0]], [[1.0, 5.0]], ["a"])
    s = Sweep.from_decisions(np.array([[0]]), es.scores, es.costs, ["x"], paid=np.array([[6.0]]))
    assert s.cost.tolist() == [[6.0]] and s.quality.tolist() == [[1.0]]


def test_aiq_minus_reference_is_zero_for_itself_and_brackets_a_clear_gain():
    rng = np.random.default_rng(0)
    n = 200
    scores = np.stack([rng.random(n) < 0.5, np.ones(n)], axis=1).astype(float)  # m1 always right, m0 half the time
    costs = np.tile([1.0, 10.0], (n, 1))
    es = _es(scores, costs, ["t"] * n)
    ranges = cost_ranges(es.scores, es.costs, es.tasks)
    oracle = OracleRouter().sweep(es, wtp_grid(es.costs.mean(0), 20))
    sweeps = {"zero": fixed_sweep(es.scores, es.costs, es.names), "oracle": oracle}
    out = aiq_minus_reference(sweeps, "zero", es.tasks, ranges, n_boot=200, seed=0)
    assert out["zero"]["overall"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0}
    o = out["oracle"]["t"]
    assert o["lo"] > 0 and o["lo"] <= o["mean"] <= o["hi"]
    assert out["oracle"]["overall"]["mean"] == pytest.approx(o["mean"])
    with pytest.raises(ValueError, match="reference 'nope'"):
        aiq_minus_reference(sweeps, "nope", es.tasks, ranges)


def _hand_table() -> EvalSet:
    """12 prompts, two tasks, three candidates: m0 cheap and right on 'easy' questions, m2 dear and always
    right; m1 in between. The prompts' words say which kind a question is."""
    prompts, scores, tasks, replies = [], [], [], {"m0": [], "m1": [], "m2": []}
    for i in range(12):
        easy = i % 2 == 0
        task = "math" if i < 6 else "code"
        prompts.append(f"{'add two small numbers' if easy else 'prove a hard theorem about primes'} {i}")
        scores.append([1.0 if easy else 0.0, 1.0 if easy or i % 3 == 0 else 0.0, 1.0])
        tasks.append(task)
        replies["m0"].append("A" if easy else "B")
        replies["m1"].append("A" if easy else "C")
        replies["m2"].append("A" if easy else "D")
    costs = np.tile([1e-4, 1e-3, 1e-2], (12, 1))
    return _es(scores, costs, tasks, prompts, replies)


def _embed(texts):
    """A two-dimensional bag of words: easy or hard (pure logic; the real routers use MiniLM)."""
    out = np.array([[1.0, 0.1] if "small" in t else [0.1, 1.0] for t in texts])
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_per_task_router_predicts_each_tasks_train_means():
    es = _hand_table()
    r = PerTaskRouter()
    r.fit(es)
    q, c = r.predict(es)
    math_rows = np.array(es.tasks) == "math"
    assert q[0].tolist() == pytest.approx(es.scores[math_rows].mean(0).tolist())
    assert c[0].tolist() == pytest.approx([1e-4, 1e-3, 1e-2])


def test_knn_router_routes_easy_prompts_cheap_and_hard_ones_dear():
    es = _hand_table()
    r = KNNPoolRouter(_embed, k=3)
    r.fit(es)
    q, c = r.predict(es)
    assert q[0].tolist() == pytest.approx([1.0, 1.0, 1.0])  # three easy neighbours
    d = route_by_wtp(q, c, 1.0)  # a unit of quality is worth a dollar: more than any call
    easy = np.arange(12) % 2 == 0
    assert (d[easy] == 0).all() and (d[~easy] == 2).all()


@pytest.mark.parametrize("make", [lambda: MLPPoolRouter(_embed, hidden=(16,), max_iter=2000, cost_k=3, seed=0),
                                  lambda: MFPoolRouter(_embed, epochs=300, lr=0.05, batch_size=12, cost_k=3)])
def test_learned_routers_separate_easy_from_hard(make):
    es = _hand_table()
    r = make()
    r.fit(es)
    q, c = r.predict(es)
    easy = np.arange(12) % 2 == 0
    assert q[easy, 0].min() > 0.7 and q[~easy, 0].max() < 0.3
    assert c[0].tolist() == pytest.approx([1e-4, 1e-3, 1e-2])  # the neighbours' costs
    if isinstance(r, MFPoolRouter):
        assert r.train_loss[-1] < r.train_loss[0]


def test_knn_cost_mean_prices_every_prompt_at_the_candidates_train_mean():
    es = _hand_table()
    es.costs[0] = [3e-4, 3e-3, 3e-2]
    r = KNNPoolRouter(_embed, k=2, cost="mean")
    r.fit(es)
    _, c = r.predict(es)
    assert c[5].tolist() == pytest.approx(es.costs.mean(0).tolist()) and (c == c[0]).all()
    with pytest.raises(ValueError, match="knn.cost"):
        KNNPoolRouter(_embed, cost="max")


def test_judge_cascade_answers_with_the_first_accepted_reply_within_budget():
    es = _hand_table()  # easy: m0 right; hard: only m2 right (m1 on every third)
    r = JudgeCascadeRouter(error_rate=0.0, budgets=5)
    r.fit(es)
    s = r.sweep(es, np.array([]))
    easy = np.arange(12) % 2 == 0
    # the smallest budget buys m0 only; the largest walks on until a right reply
    assert (s.decisions[0] == 0).all() and s.cost[0] == pytest.approx(1e-4)
    assert (s.decisions[-1][easy] == 0).all() and s.quality[-1].mean() == 1.0
    hard_m2 = ~easy & (es.scores[:, 1] == 0)
    assert s.cost[-1][hard_m2] == pytest.approx(1e-4 + 1e-3 + 1e-2)
    flipped = JudgeCascadeRouter(error_rate=1.0, budgets=5)
    flipped.fit(es)
    # a judge that is always wrong rejects right replies: the easy prompts go past m0
    assert (flipped.sweep(es, np.array([])).decisions[-1][easy] != 0).all()


def test_reply_key_reads_option_letters_and_normalises_text():
    assert reply_key("B\n") == "B" and reply_key(" (C) because") == "C" and reply_key("A) x") == "A"
    assert reply_key("Def f(x): return 1") == reply_key("def f(x):  return 1")
    assert reply_key(None) == "" and reply_key("") == ""


def test_hull_chain_keeps_the_candidates_on_some_tasks_hull_by_cost():
    # m1 is dearer than m0 and worse on both tasks: never on a hull
    es = _es([[1, 0, 1], [1, 0, 1], [0, 0, 1]], [[1, 2, 3]] * 3, ["a", "a", "b"])
    assert hull_chain(es) == [0, 2]


def test_cascade_stops_at_trusted_replies_and_pays_for_every_call():
    es = _hand_table()
    r = CascadeRouter(_embed, chain=["m0", "m1", "m2"], features=("agreement",), l2=0.1, thresholds=5)
    r.fit(es)
    s = r.sweep(es, np.array([0.0]))
    assert len(s.labels) == 6  # 5 thresholds and one past 1 (the whole chain)
    # threshold 0: the first reply is trusted: m0 on every prompt, one call each
    assert (s.decisions[0] == 0).all() and s.cost[0].tolist() == pytest.approx([1e-4] * 12)
    # past 1: every call bought on every prompt
    assert s.cost[-1].tolist() == pytest.approx([1e-4 + 1e-3 + 1e-2] * 12)
    with pytest.raises(ValueError, match="reads replies"):
        CascadeRouter(_embed).fit(_es([[1, 0], [0, 1]], [[1, 2]] * 2, ["a", "a"]))


def test_escalate_answers_agreeing_probes_cheaply_and_escalates_the_rest():
    es = _hand_table()
    r = EscalateRouter(_embed, chain=["m0", "m1", "m2"], max_probes=2, features=("agreement",), l2=0.01)
    r.fit(es)
    ws = np.array([0.0, 0.1])
    s = r.sweep(es, ws)
    assert s.labels == ["probes=0,w=0", "probes=0,w=0.1", "probes=1,w=0", "probes=1,w=0.1", "probes=2,w=0",
                        "probes=2,w=0.1"]
    easy = np.arange(12) % 2 == 0
    # two probes, w = 0.1: where m0 and m1 agree (easy) a probe's reply is worth 0.1 * P(correct) > 0.09, the
    # value of paying 0.01 for m2; where they disagree, m2 is
    d, cost = s.decisions[5], s.cost[5]
    assert np.isin(d[easy], [0, 1]).all() and (d[~easy] == 2).all()
    assert cost[easy] == pytest.approx(1.1e-3) and cost[~easy] == pytest.approx(1.1e-3 + 1e-2)
    assert s.quality[5].mean() == 1.0


def test_build_pool_router_names_unknown_types_and_fields():
    with pytest.raises(ValueError, match=r"eval.routers.x.type: 'nope'"):
        build_pool_router("x", {"type": "nope"}, _embed)
    with pytest.raises(ValueError, match=r"eval.routers.k: .*unexpected keyword argument 'kk'"):
        build_pool_router("k", {"type": "knn", "kk": 3}, _embed)
    with pytest.raises(ValueError, match="knn.k"):
        build_pool_router("k", {"type": "knn", "k": 0}, _embed)


def test_selector_learns_online_one_bandit_per_cost_weight():
    es = _hand_table()
    big = EvalSet.concat([es] * 8)  # 96 prompts: enough feedback for the bandit to tell the candidates apart
    r = SelectorPoolRouter(_embed, cost_weights=[0.0, 1000.0], seed=0)
    r.fit(big)
    s = r.sweep(big, np.array([]))
    assert s.labels == ["cost_weight=0", "cost_weight=1000"] and s.decisions.shape == (2, 96)
    # without a cost bonus the always-right candidate wins most calls; a huge bonus favours cheaper ones
    assert (s.decisions[0] == 2).mean() > 0.5
    assert (s.decisions[1] == 2).mean() < 0.2 and s.cost[1].mean() < s.cost[0].mean() / 3
    with pytest.raises(ValueError, match="selector.cost_weights"):
        SelectorPoolRouter(_embed, cost_weights=[])
