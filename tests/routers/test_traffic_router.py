"""Routers trained on traffic with blanks (``rlrouter.routers.traffic_router``): the reader of exports, the kNN that
reads only observed cells, and the off-policy estimate with the exploration calls counted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlrouter.eval.ope import LoggedFeedback, evaluate_all, one_hot
from rlrouter.routers.traffic_router import TrafficKNNRouter, read_logged_table, reward_of

NAMES = ["cheap", "mid", "dear"]
COST = {"cheap": 1e-4, "mid": 5e-4, "dear": 5e-3}


def topic_embed(texts):
    """Two topics, one axis each: 'math ...' and 'poem ...' prompts."""
    return np.array([[1.0, 0.0] if t.startswith("math") else [0.0, 1.0] for t in texts], dtype=np.float32)


def _export(path, rows):
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def _row(i, prompt, observed, logged=None, p=None, explored=None, ep=None):
    r = {"sample_id": f"r{i}", "prompt": prompt, "logged_model": logged, "logged_propensity": p,
         "explored_model": explored, "explored_propensity": ep}
    for m in NAMES:
        r[m] = observed.get(m)
        r[f"{m}|total_cost"] = COST[m] if m in observed else None
    return r


def test_the_reader_keeps_blanks_and_names_bad_cells(tmp_path):
    f = _export(tmp_path / "t.parquet", [_row(0, "math 1", {"cheap": 0.0}, "cheap", 1.0, "mid", 0.1),
                                         _row(1, "poem 1", {"mid": 1.0, "dear": 1.0}, "dear", 1.0)])
    t = read_logged_table(f)
    assert t.names == NAMES and np.isnan(t.scores[0, 1:]).all() and t.scores[1, 1] == 1.0
    assert list(t.logged) == [0, 2] and list(t.explored) == [1, -1] and t.explored_propensity[0] == 0.1
    _export(tmp_path / "bad.parquet", [_row(0, "math 1", {"cheap": 1.5})])
    with pytest.raises(ValueError, match=r"bad.parquet: row 1, column 'cheap': a score in \[0, 1\]"):
        read_logged_table(tmp_path / "bad.parquet")
    _export(tmp_path / "who.parquet", [_row(0, "math 1", {"cheap": 1.0}, "gpt-9", 1.0)])
    with pytest.raises(ValueError, match="row 1, column 'logged_model': 'gpt-9' is not a candidate"):
        read_logged_table(tmp_path / "who.parquet")
    with pytest.raises(ValueError, match="candidates \\['gpt-9'\\] have no"):
        read_logged_table(f, ["cheap", "gpt-9"])


def _topic_table(n=200):
    """cheap is right on math, wrong on poems; mid is always wrong; dear is right on both; each row observes the
    logged route and, on a third of the rows, one more."""
    rows = []
    for i in range(n):
        topic = "math" if i % 2 == 0 else "poem"
        truth = {"cheap": float(topic == "math"), "mid": 0.0, "dear": 1.0}
        logged = NAMES[i % 3]
        seen = {logged: truth[logged]}
        ex = None
        if i % 3 == 1:
            ex = NAMES[(i + 1) % 3]
            seen[ex] = truth[ex]
        rows.append(_row(i, f"{topic} {i}", seen, logged, 1.0, ex, 0.5 if ex else None))
    return rows


def test_the_knn_learns_from_observed_cells_only_and_pays_for_cost(tmp_path):
    t = read_logged_table(_export(tmp_path / "t.parquet", _topic_table()))
    r = TrafficKNNRouter("flow", NAMES, topic_embed, k=10, cost_weight=0.1, question="full")
    r.fit_logged(t)
    # math: cheap is right and cheapest; poems: only dear is right (its reward 1 - 0.1 x 5 m$ = 0.5)
    assert list(r.decide(["math x", "poem y"])) == [0, 2]
    free = TrafficKNNRouter("flow", NAMES, topic_embed, k=10, cost_weight=0.0, question="full")
    free.fit_logged(t)
    assert free.decide(["math x"])[0] in (0, 2)  # both always right on math: cost no longer breaks the tie
    # a candidate never observed: the mean score of every observation and the dearest observed cost
    only_cheap = t.rows(np.flatnonzero((t.logged == 0) & (t.explored < 0)))
    one = TrafficKNNRouter("flow", NAMES, topic_embed, k=10, cost_weight=0.1, question="full")
    one.fit_logged(only_cheap)
    s, c = one.predict_embedded(topic_embed(["math x"]))
    assert c[0, 2] == pytest.approx(COST["cheap"]) and s[0, 2] == pytest.approx(np.nanmean(only_cheap.scores))
    # the same candidates in another order are put in the router's order
    other = TrafficKNNRouter("flow", NAMES[::-1], topic_embed, k=10, cost_weight=0.1, question="full")
    other.fit_logged(t)
    assert [NAMES[::-1][i] for i in other.decide(["math x", "poem y"])] == ["cheap", "dear"]
    with pytest.raises(ValueError, match="traffic_knn.k: must be >= 1"):
        TrafficKNNRouter("flow", NAMES, topic_embed, k=0)


def test_train_router_trains_on_exports_and_the_saved_router_decides_the_same(tmp_path):
    from rlrouter.routers.saved import load_router
    from rlrouter.eval.train_router import run

    f = _export(tmp_path / "t.parquet", _topic_table(60))
    m = run({"logs": [str(f)], "router": {"type": "traffic_knn", "k": 5, "cost_weight": 0.1, "question": "full"},
             "output_dir": str(tmp_path / "flow")})
    assert m.type == "traffic_knn" and m.candidate_names == NAMES and m.weak == "cheap" and m.strong == "dear"
    assert m.train["observed_cells"] == 60 + 20 and m.state["rows"] == 60
    saved = load_router(tmp_path / "flow")
    prompts = ["math one plus one", "poem about rain", "math 2", "poem 7"]
    fresh = TrafficKNNRouter("flow", NAMES, saved.router.embed, k=5, cost_weight=0.1, question="full")
    fresh.fit_logged(read_logged_table(f))
    assert list(saved.route(prompts)[0]) == list(fresh.decide(prompts))
    with pytest.raises(ValueError, match="logs: a list of tables"):
        run({"logs": str(f)})
    with pytest.raises(ValueError, match="does not learn from tables with blanks"):
        run({"logs": [str(f)], "router": {"type": "always", "candidate": "weak"}, "output_dir": str(tmp_path / "x")})


def test_exploration_makes_routes_the_logger_never_took_estimable():
    """A deterministic logger (propensity 1) never takes some routes; the explored calls, weighted by their
    logged probability, make the target's value estimable: IPS and DR land on the truth, while the logged
    routes alone (no exploration) cannot see the target's routes at all."""
    rng = np.random.default_rng(0)
    n, m = 20_000, 4
    q = rng.random((n, m))
    rewards = (rng.random((n, m)) < q).astype(float)
    logged = np.zeros(n, dtype=np.int64)  # always candidate 0
    target = q.argmax(axis=1)
    truth = float(rewards[np.arange(n), target].mean())
    explored = np.where(rng.random(n) < 0.4, 1 + rng.integers(0, m - 1, n), -1)  # uniform over the others
    ep = np.full(n, 0.4 / (m - 1))
    rows = np.arange(n)
    log = LoggedFeedback(logged, np.ones(n), rewards[rows, logged], explored=explored, explored_propensities=ep,
                         explored_rewards=np.where(explored >= 0, rewards[rows, np.maximum(explored, 0)], 0.0))
    est = evaluate_all(one_hot(target, m), log, q)
    for name in ("ips", "snips", "dr"):
        assert est[name].lo <= truth <= est[name].hi, (name, est[name], truth)
    blind = evaluate_all(one_hot(target, m), LoggedFeedback(logged, np.ones(n), rewards[rows, logged]), q * 0)
    assert not blind["ips"].lo <= truth <= blind["ips"].hi  # without exploration: the target's routes unseen
    assert reward_of(1.0, 0.002, 0.1) == pytest.approx(0.8)


def test_pessimism_prefers_the_candidate_seen_more_when_the_means_tie(tmp_path):
    """Two candidates right on every math prompt at the same cost: 'mid' seen on 3 prompts, 'dear' on 60 ('cheap'
    wrong on 60). Their means about tie; the lower bound of the one seen on 3 is lower."""
    rows = [_row(i, f"math {i}", {"dear": 1.0, "cheap": 0.0}, "dear", 1.0) for i in range(60)]
    rows += [_row(60 + i, f"math {60 + i}", {"mid": 1.0}, "mid", 1.0) for i in range(3)]
    t = read_logged_table(_export(tmp_path / "t.parquet", rows))
    t.costs[~np.isnan(t.costs)] = 0.0  # the same price: only the evidence differs
    plain = TrafficKNNRouter("flow", NAMES, topic_embed, k=10, prior=1.0, question="full")
    careful = TrafficKNNRouter("flow", NAMES, topic_embed, k=10, prior=1.0, pessimism=2.0, question="full")
    for r in (plain, careful):
        r.fit_logged(t)
    s_plain, _ = plain.predict_embedded(topic_embed(["math x"]))
    s_careful, _ = careful.predict_embedded(topic_embed(["math x"]))
    assert s_plain[0, 1] == pytest.approx(s_plain[0, 2], abs=0.05)  # 'mid' (3 seen) about ties 'dear' (60)
    assert s_careful[0, 2] - s_careful[0, 1] > 0.1 and careful.decide(["math x"])[0] == 2
    with pytest.raises(ValueError, match="traffic_knn.pessimism"):
        TrafficKNNRouter("flow", NAMES, topic_embed, pessimism=-1)
