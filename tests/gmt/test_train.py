"""Loss and metrics against hand-computed values; a real epoch; checkpoints; the scorer API."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlrouter.gmt.graph import GraphError
from rlrouter.gmt.model import GMTModelConfig, _ConcatHeteroLinear, isolated_query_embedding
from rlrouter.gmt.scorer import GMTRouterScorer, UnknownUserError
from rlrouter.gmt.train import (GroupBatch, GMTTrainConfig, auc_score, build_model, evaluate, few_shot_curve,
                                fit, pairwise_metrics, preference_loss, save_checkpoint, temporal_split,
                                train_step)

# ---------------------------------------------------------------- loss and metrics (hand-computed)


def test_pairwise_logistic_loss_by_hand():
    scores = torch.tensor([[2.0, 0.5], [2.0, 0.5]])
    ratings = torch.tensor([[5.0, 3.0], [1.0, 4.0]])
    valid = torch.ones(2, 2, dtype=torch.bool)
    # -log sigmoid(1.5) = log(1 + e^-1.5) = 0.201413; -log sigmoid(-1.5) = 1.701413
    assert preference_loss(scores[:1], ratings[:1], valid[:1]).item() == pytest.approx(0.201413, abs=1e-5)
    assert preference_loss(scores[1:], ratings[1:], valid[1:]).item() == pytest.approx(1.701413, abs=1e-5)
    assert preference_loss(scores, ratings, valid).item() == pytest.approx((0.201413 + 1.701413) / 2, abs=1e-5)


def test_cross_entropy_for_groups_of_three_and_ties_skipped():
    scores = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [3.0, 1.0, 0.0]])
    ratings = torch.tensor([[5.0, 1.0, 2.0], [5.0, 5.0, 2.0], [4.0, 4.0, 0.0]])
    valid = torch.tensor([[True, True, True], [True, True, True], [True, True, False]])
    # row 0: -log(e^1 / (e^1 + e^2 + e^0)) = 1.407606; row 1: top tie, row 2: pair tie -> skipped
    assert preference_loss(scores, ratings, valid).item() == pytest.approx(1.407606, abs=1e-5)
    # all groups tied: zero loss that still backpropagates
    s = scores[1:].clone().requires_grad_(True)
    loss = preference_loss(s, ratings[1:], valid[1:])
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(s.grad, torch.zeros_like(s))


def test_cross_entropy_of_a_pair_equals_pairwise_logistic():
    s = torch.tensor([[0.3, -1.2]])
    ce = torch.nn.functional.cross_entropy(s, torch.tensor([1]))
    assert preference_loss(s, torch.tensor([[1.0, 4.0]]), torch.ones(1, 2, dtype=torch.bool)).item() == \
        pytest.approx(ce.item(), abs=1e-6)


def test_auc_with_ties_by_hand():
    # positives 0.9, 0.4; negatives 0.1, 0.4 -> (1 + 1 + 1 + 0.5) / 4
    assert auc_score(np.array([1, 0, 1, 0]), np.array([0.9, 0.1, 0.4, 0.4])) == pytest.approx(0.875)
    assert math.isnan(auc_score(np.array([1, 1]), np.array([0.1, 0.2])))


def test_pairwise_metrics_constant_and_perfect_scorers():
    ratings = np.array([[5.0, 1.0], [2.0, 4.0], [3.0, 3.0]])
    valid = np.ones((3, 2), dtype=bool)
    const = pairwise_metrics(np.zeros((3, 2)), ratings, valid)
    assert const == {"pairs": 2, "accuracy": 0.5, "auc": 0.5}
    perfect = pairwise_metrics(ratings, ratings, valid)
    assert perfect["accuracy"] == 1.0 and perfect["auc"] == 1.0
    # always the first candidate: right on 1 of 2 pairs, whichever order the log lists them in
    first = pairwise_metrics(np.array([[1.0, 0.0]] * 3), ratings, valid)
    assert first["accuracy"] == 0.5


def test_concat_hetero_linear_matches_pyg():
    from torch_geometric.nn.dense.linear import HeteroLinear

    torch.manual_seed(0)
    ref = HeteroLinear(8, 4, num_types=3, is_sorted=True, bias=False)
    fast = HeteroLinear(8, 4, num_types=3, is_sorted=True, bias=False)
    fast.load_state_dict(ref.state_dict())
    fast.__class__ = _ConcatHeteroLinear
    x = torch.randn(10, 8, requires_grad=True)
    types = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    a, b = ref(x, types), fast(x, types)
    assert torch.allclose(a, b, atol=1e-6)
    ga, = torch.autograd.grad(a.square().sum(), x)
    gb, = torch.autograd.grad(b.square().sum(), x)
    assert torch.allclose(ga, gb, atol=1e-5)


# ---------------------------------------------------------------- real graph, real training


def test_model_layers_follow_the_paper_rule(small_graph):
    assert small_graph.multi_turn
    assert build_model(small_graph, GMTModelConfig()).cfg.num_layers == 3
    assert GMTModelConfig(num_layers=0).resolved(multi_turn=False).num_layers == 2


def test_one_real_epoch_lowers_the_loss(small_graph):
    g = small_graph
    split = temporal_split(g, 0.0, 0.25)
    batch = GroupBatch.from_groups(g, g.groups(split.train))
    assert len(batch) > 40
    model = build_model(g, GMTModelConfig(hidden_dim=32, dropout=0.0), seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    gen = torch.Generator().manual_seed(0)

    def full_loss():
        # each training group predicted with every other training turn visible
        return evaluate(model, g, split.train, batch)["loss"]

    before = full_loss()
    # one epoch = every training group is a target once (target_frac slices of a permutation)
    steps = 4
    for _ in range(steps):
        model.train()
        opt.zero_grad()
        loss, n = train_step(model, g, split.train, batch, 1.0 / steps, gen)
        loss.backward()
        opt.step()
    after = full_loss()
    assert after < before - 0.005, (before, after)


def test_fit_keeps_the_best_validation_auc(small_graph):
    g = small_graph
    split = temporal_split(g, 0.2, 0.2)
    res = fit(g, split, GMTModelConfig(hidden_dim=32), GMTTrainConfig(epochs=8, eval_every=2, patience=0, seed=1))
    aucs = [r["val/auc"] for r in res.history if "val/auc" in r]
    assert len(aucs) == 4
    assert res.best_val["auc"] == max(aucs)
    assert res.best_epoch == 2 * (int(np.argmax(aucs)) + 1)
    # the returned model is the best one, not the last one
    val = GroupBatch.from_groups(g, g.groups(split.val))
    assert evaluate(res.model, g, split.train, val)["auc"] == pytest.approx(res.best_val["auc"])


# ---------------------------------------------------------------- checkpoint and scorer


@pytest.fixture(scope="module")
def trained(small_graph, tmp_path_factory):
    g = small_graph
    split = temporal_split(g, 0.2, 0.2)
    res = fit(g, split, GMTModelConfig(hidden_dim=32), GMTTrainConfig(epochs=6, eval_every=2, seed=0))
    path = save_checkpoint(tmp_path_factory.mktemp("gmt") / "ckpt", res.model, g)
    return res.model, g, path


def test_checkpoint_round_trip_gives_identical_scores(trained, small_sim):
    model, g, path = trained
    live = GMTRouterScorer(model, g)
    loaded = GMTRouterScorer.load(path)
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    assert loaded.llms == live.llms and loaded.users == live.users
    rec = small_sim.records[0]
    queries = [rec.interactions[0].query, rec.interactions[-1].query, "A question nobody has asked yet?"]
    for user in (rec.user_id, small_sim.records[5].user_id):
        for q in queries:
            assert loaded.score(user, q) == live.score(user, q)
    s = loaded.score(rec.user_id, queries[2])
    assert set(s) == set(g.llms)
    assert loaded.route(rec.user_id, queries[0]) in g.llms


def test_unseen_query_equals_an_isolated_node_of_the_full_graph(trained):
    model, g, _ = trained
    # hide every interaction on query 0: its node is then isolated in the full graph
    visible = g.query != 0
    with torch.no_grad():
        h = model.encode(g.x_dict(), g.edge_index_dict(visible))
        iso = isolated_query_embedding(model, g.query_x[:1])
    assert torch.allclose(h["query"][0], iso[0], atol=1e-6)


def test_scorer_add_user_few_shot_and_errors(trained, small_sim):
    model, g, path = trained
    scorer = GMTRouterScorer.load(path)
    with pytest.raises(UnknownUserError, match="'newbie' is not in the GMTRouter graph"):
        scorer.score("newbie", "hello?")
    donor = small_sim.records[1].interactions[:6]
    added = scorer.add_user("newbie", [it.__dict__ for it in donor])
    assert added == 6 and "newbie" in scorer.users
    s = scorer.score("newbie", donor[0].query)
    assert set(s) == set(g.llms) and all(np.isfinite(list(s.values())))
    bad = dict(donor[0].__dict__, model_used="gpt-5")
    with pytest.raises(GraphError, match=r"field 'interactions\[0\].model_used'.*'gpt-5' is not a known candidate"):
        scorer.add_user("other", [bad])
    with pytest.raises(GraphError, match=r"field 'interactions\[0\].user_feedback'"):
        scorer.add_user("other", [dict(donor[0].__dict__, user_feedback="great")])


def test_few_shot_curve_has_a_row_per_k(trained):
    model, g, _ = trained
    new_users = [0, 1]
    train_users = torch.arange(2, len(g.users))
    base = temporal_split(g, 0.0, 0.2, users=train_users)
    new_split = temporal_split(g, 0.0, 0.3, users=torch.tensor(new_users))
    rows = few_shot_curve(model, g, base.train | base.test, new_users, [0, 4], new_split.test)
    assert [r["k"] for r in rows] == [0, 4]
    assert all(r["pairs"] > 0 for r in rows)


def test_serve_deployment_routes_a_known_user_with_the_trained_checkpoint(trained, small_sim, tmp_path):
    """The real checkpoint through serve/routers.py's deployment class and the HTTP API."""
    import yaml
    from fastapi.testclient import TestClient

    from rlrouter.pool.pool import CandidatePool
    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.serving.api import create_app, install
    from rlrouter.serving.auth import ApiKeyAuth
    from rlrouter.serving.config import ServingConfig
    from rlrouter.serving.service import LocalSelectorClient, RouterService
    from serve.routers import GMTRouterDeployment
    from tests.helpers import CONF_DIR

    _, _, path = trained
    deployment = GMTRouterDeployment.func_or_class(str(path))  # the class Serve would run

    class Local:
        async def score(self, user_id, query):
            out = deployment.score(user_id, query)
            if "unknown_user" in out:
                raise KeyError(user_id)
            return out["scores"]

    user = small_sim.records[0].user_id
    pool_cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    pool = CandidatePool.from_config(pool_cfg)
    name_map = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in pool_cfg["candidates"]}
    cfg = SelectorConfig(storage_path=str(tmp_path / "s.json"), seed=0)
    selector = Selector(cfg, pool.names)
    selector.load()
    serving = ServingConfig(api_keys=[{"key": "k-u", "user_id": user}, {"key": "k-new", "user_id": "newcomer"}])
    install(RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool, gmt=Local(),
                          name_map=name_map), ApiKeyAuth(serving.keys({})))
    client = TestClient(create_app())
    query = small_sim.records[0].interactions[0].query
    r = client.post("/route", json={"query": query}, headers={"Authorization": "Bearer k-u"})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = GMTRouterScorer.load(path).score(user, query)
    best_logged = max(expected, key=expected.get)
    assert body["mode"] == "gmtrouter"
    assert name_map[body["model"]] == best_logged
    other = client.post("/route", json={"query": query}, headers={"Authorization": "Bearer k-new"})
    assert other.status_code == 200 and other.json()["mode"] != "gmtrouter"
