"""The cold path: a user with no history on a query seen as a new node, in training and serving.

A tiny hand-written log and a deterministic stand-in for MiniLM keep this pure logic: the checks are
that training's cold path is exactly the one the scorer serves, that ``cold_frac`` 0 leaves the paper's
training untouched, and that ``fit`` with ``cold_frac`` learns and reports the cold path. Whether it
helps on real logs is measured, not tested: benchmarks/bench_unseen_subjects_gmt.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrouter.data.formats import GMTRecord
from rlrouter.gmt.graph import build_graph
from rlrouter.gmt.model import GMTModelConfig, score_cold
from rlrouter.gmt.scorer import GMTRouterScorer
from rlrouter.gmt.train import (GroupBatch, Split, GMTTrainConfig, build_model, evaluate, fit, preference_loss,
                                score_groups, train_step)
from tests.helpers import hash_embed

WEAK, STRONG = "mixtral", "gpt-4"
HARD = ["Prove the theorem.", "Integrate x^2 sin x.", "Derive the Navier-Stokes equations.", "Solve the ODE."]
EASY = ["Say hi.", "What colour is the sky?", "Name a fruit.", "Spell cat."]


def _log(n_users: int = 4) -> list[GMTRecord]:
    """Every user prefers the strong candidate on HARD queries and the weak (cheap) one on EASY ones."""
    rows = []
    for u in range(n_users):
        inter, t = [], 0
        for j, q in enumerate(HARD + EASY):
            best, other = (STRONG, WEAK) if q in HARD else (WEAK, STRONG)
            for m, fb in ((best, 5), (other, 1 + u % 2)):
                inter.append({"query": q, "model_used": m, "user_feedback": fb, "timestamp": t, "session_id": f"s{j}"})
                t += 1
        rows.append({"user_id": f"u{u}", "interactions": inter})
    return [GMTRecord.from_dict(r) for r in rows]


@pytest.fixture(scope="module")
def graph():
    torch.set_num_threads(1)
    return build_graph(_log(), embed=hash_embed)


def _model(graph, seed: int = 0):
    return build_model(graph, GMTModelConfig(hidden_dim=16, predictor_hidden=16, dropout=0.0), seed=seed)


def test_training_cold_path_is_the_scorers_path_for_an_unknown_user(graph):
    model = _model(graph).eval()
    batch = GroupBatch.from_groups(graph, graph.groups())
    with torch.no_grad():
        h = model.encode(graph.x_dict(), graph.edge_index_dict())
        s = score_groups(model, graph, h, batch, torch.ones(len(batch), dtype=torch.bool))  # (G, 2)
    scorer = GMTRouterScorer(model, graph, embed=hash_embed)
    texts = [HARD[0], EASY[0]]
    served = scorer.score_batch(texts, user_id=None, graph_queries=False)  # (2, L), llms order
    for i, text in enumerate(texts):
        row = int(torch.nonzero(batch.queries == graph.query_index(text))[0, 0])
        want = served[i][batch.llms[row].numpy()]
        np.testing.assert_allclose(s[row].numpy(), want, atol=1e-5)
    # a mask of all False is the in-graph score, untouched
    with torch.no_grad():
        warm = model.score(h, batch.users, batch.queries, batch.llms)
        same = score_groups(model, graph, h, batch, torch.zeros(len(batch), dtype=torch.bool))
    assert torch.equal(warm, same)


def test_score_cold_pads_with_zero(graph):
    model = _model(graph).eval()
    with torch.no_grad():
        h = model.encode(graph.x_dict(), graph.edge_index_dict())
        s = score_cold(model, h, graph.query_x[:2], torch.tensor([[0, 1], [1, -1]]))
    assert s.shape == (2, 2) and s[1, 1].item() == 0.0 and s[1, 0].item() != 0.0


def test_cold_frac_zero_is_the_papers_step_and_one_is_all_cold(graph):
    batch = GroupBatch.from_groups(graph, graph.groups())
    train = torch.ones(graph.num_interactions, dtype=torch.bool)
    model = _model(graph).eval()  # eval: no dropout, so the losses below are deterministic
    g0, g1 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    plain, _ = train_step(model, graph, train, batch, 0.5, g0)
    zero, _ = train_step(model, graph, train, batch, 0.5, g1, cold_frac=0.0)
    assert plain.item() == zero.item()
    assert torch.equal(g0.get_state(), g1.get_state())  # cold_frac 0 draws nothing more
    # cold_frac 1: the loss of the same targets scored through score_cold
    gen = torch.Generator().manual_seed(5)
    loss, n = train_step(model, graph, train, batch, 0.5, gen, cold_frac=1.0)
    rows = torch.randperm(len(batch), generator=torch.Generator().manual_seed(5))[:n]
    t = batch.subset(rows)
    with torch.no_grad():
        visible = train.clone()
        visible[t.ids[t.valid]] = False
        h = model.encode(graph.x_dict(), graph.edge_index_dict(visible))
        want = preference_loss(score_cold(model, h, graph.query_x[t.queries], t.llms), t.ratings, t.valid)
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)


def test_fit_with_cold_frac_learns_the_common_preference_and_logs_the_cold_auc(graph):
    everything = torch.ones(graph.num_interactions, dtype=torch.bool)
    split = Split(train=everything, val=everything.clone(), test=torch.zeros_like(everything))
    batch = GroupBatch.from_groups(graph, graph.groups())
    cfg = dict(epochs=60, lr=1e-2, eval_every=5, patience=0, seed=0, target_frac=0.5)
    res = fit(graph, split, GMTModelConfig(hidden_dim=16, predictor_hidden=16, dropout=0.0),
              GMTTrainConfig(**cfg, cold_frac=0.5))
    cold = evaluate(res.model, graph, everything, batch, cold=True)
    assert cold["auc"] > 0.95, cold
    assert "cold_auc" in res.best_val and any("val/cold_auc" in r for r in res.history)


def test_select_on_cold_keeps_the_epoch_with_the_best_cold_validation_auc(graph):
    everything = torch.ones(graph.num_interactions, dtype=torch.bool)
    split = Split(train=everything, val=everything.clone(), test=torch.zeros_like(everything))
    cfg = dict(epochs=20, lr=1e-2, eval_every=2, patience=0, seed=0, target_frac=0.5)
    res = fit(graph, split, GMTModelConfig(hidden_dim=16, predictor_hidden=16, dropout=0.0),
              GMTTrainConfig(**cfg, select_on="cold"))  # cold_frac 0: the cold path is still validated
    rows = [r for r in res.history if "val/cold_auc" in r]
    assert len(rows) == 10
    best = max(rows, key=lambda r: r["val/cold_auc"])  # the first of equals, as fit keeps it
    assert res.best_epoch == best["epoch"] and res.best_val["cold_auc"] == best["val/cold_auc"]
    with pytest.raises(ValueError, match="select_on: expected one of \\('graph', 'cold'\\), got 'warm'"):
        GMTTrainConfig(select_on="warm")


def test_cold_frac_outside_zero_one_names_the_field():
    with pytest.raises(ValueError, match="cold_frac: expected in \\[0, 1\\], got 1.5"):
        GMTTrainConfig(cold_frac=1.5)
