"""The GMTRouter evaluation adapter: cold-start scoring, the threshold-router contract, the factory.

A tiny hand-written log and a deterministic stand-in for MiniLM keep this pure logic (no Ray, no
real embeddings): the checks are about which user and query embeddings reach the predictor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrouter.data.formats import GMTRecord
from rlrouter.routers.adapters import GMTRouterAdapter
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, build_router
from rlrouter.gmt.graph import build_graph
from rlrouter.gmt.model import GMTModelConfig
from rlrouter.gmt.scorer import GMTRouterScorer, UnknownUserError
from rlrouter.gmt.train import build_model, save_checkpoint
from rlrouter.pool.base import Candidate
from tests.helpers import hash_embed

WEAK, STRONG = "mixtral", "gpt-4"


def _log() -> list[GMTRecord]:
    rows = []
    for u, (likes, dislikes) in enumerate([(STRONG, WEAK), (WEAK, STRONG), (STRONG, WEAK)]):
        inter = []
        for t, q in enumerate(["What is 2+2?", "Capital of France?", "Name a prime."]):
            inter.append({"query": q, "model_used": likes, "user_feedback": 5, "timestamp": 2 * t, "session_id": f"s{t}"})
            inter.append({"query": q, "model_used": dislikes, "user_feedback": 1, "timestamp": 2 * t + 1,
                          "session_id": f"s{t}"})
        rows.append({"user_id": f"u{u}", "interactions": inter})
    return [GMTRecord.from_dict(r) for r in rows]


@pytest.fixture(scope="module")
def scorer():
    torch.set_num_threads(1)
    g = build_graph(_log(), embed=hash_embed)
    model = build_model(g, GMTModelConfig(hidden_dim=16, predictor_hidden=16), seed=0).eval()
    return GMTRouterScorer(model, g, embed=hash_embed)


def test_cold_user_is_a_user_node_without_edges_in_the_full_graph(scorer):
    g, model = scorer.graph, scorer.model
    queries = ["What is 2+2?", "A question nobody asked?"]
    got = scorer.score_batch(queries, user_id=None)  # (N, L)
    # the full graph plus one more user node that has no edges, scored by the model's own path
    x = g.x_dict()
    x["user"] = torch.zeros(len(g.users) + 1, 1)
    with torch.no_grad():
        h = model.encode(x, g.edge_index_dict())
        new_q = torch.from_numpy(hash_embed(queries[1:]))
        from rlrouter.gmt.model import isolated_query_embedding

        h["query"] = torch.cat([h["query"][[g.query_index(queries[0])]], isolated_query_embedding(model, new_q)])
        llms = torch.arange(len(g.llms)).expand(2, -1)
        want = model.score(h, torch.tensor([len(g.users)] * 2), torch.tensor([0, 1]), llms).numpy()
    assert got.shape == (2, len(g.llms))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_score_batch_matches_score_for_known_users_and_isolates_queries_on_request(scorer):
    queries = ["What is 2+2?", "Name a prime.", "Unseen?"]
    batch = scorer.score_batch(queries, user_id="u1")
    for i, q in enumerate(queries):
        one = scorer.score("u1", q)
        np.testing.assert_allclose(batch[i], [one[m] for m in scorer.llms], atol=1e-5)
    # graph_queries=False: a logged query is scored as if it were new (its ratings do not reach it)
    iso = scorer.score_batch(queries[:1], user_id="u1", graph_queries=False)
    fresh = scorer.score_batch(["What  is 2+2? "], user_id="u1", query_x=hash_embed(["What is 2+2?"]),
                               graph_queries=False)
    np.testing.assert_allclose(iso, fresh, atol=1e-6)
    assert not np.allclose(iso, batch[:1])
    with pytest.raises(UnknownUserError, match="'nobody' is not in the GMTRouter graph"):
        scorer.score_batch(queries, user_id="nobody")
    assert scorer.score_batch([], user_id=None).shape == (0, len(scorer.llms))


class FakeScorer:
    llms = [STRONG, "other", WEAK]

    def __init__(self):
        self.calls = []

    def score_batch(self, prompts, user_id=None, query_x=None, graph_queries=True):
        self.calls.append((list(prompts), user_id, graph_queries))
        return np.array([[float(len(p)), 0.0, 3.0] for p in prompts])  # strong logit = prompt length


def test_adapter_strong_score_is_the_logit_gap_and_threshold_zero_is_argmax():
    fake = FakeScorer()
    r = GMTRouterAdapter("g", fake, weak=0, strong=1, llm_of={0: WEAK, 1: STRONG})
    prompts = ["ab", "abc", "abcdef"]
    np.testing.assert_allclose(r.strong_score(prompts), [-1.0, 0.0, 3.0])
    assert r.decide(prompts).tolist() == [0, 1, 1]  # a tie goes to strong
    assert fake.calls[0][1:] == (None, False)  # cold-start user, queries isolated by default
    assert r.calibrate(prompts, 1 / 3) == pytest.approx(1.0)  # the 2/3 quantile of [-1, 0, 3]
    assert r.decide(prompts).tolist() == [0, 0, 1]
    assert r.strong_score([]).shape == (0,)
    with pytest.raises(ValueError, match=r"llm_map: \['gpt-5'\] are not llm nodes"):
        GMTRouterAdapter("g", fake, weak=0, strong=1, llm_of={0: WEAK, 1: "gpt-5"})


def test_factory_loads_a_checkpoint_and_routes_eval_candidates(scorer, tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", scorer.model, scorer.graph)
    names = ["mistral-eval-name", STRONG]
    train = EvalSet(prompts=["x"], candidates=[Candidate(n, 1.0, 1.0) for n in names], scores=np.ones((1, 2)),
                    costs=np.ones((1, 2)), sources=["t"], prompt_tokens=np.ones(1), completion_tokens=np.ones((1, 2)))
    ctx = RouterContext(candidates=names, weak=0, strong=1, train=train, embed=hash_embed)
    with pytest.raises(ValueError, match="are not llm nodes"):
        build_router({"type": "gmtrouter", "checkpoint": str(path)}, ctx)
    r = build_router({"type": "gmtrouter", "name": "gmt", "checkpoint": str(path),
                      "llm_map": {"mistral-eval-name": WEAK}}, ctx)
    assert isinstance(r, GMTRouterAdapter) and r.name == "gmt"
    prompts = ["What is 2+2?", "Unseen?"]
    s = scorer.score_batch(prompts, graph_queries=False)
    cols = [scorer.llms.index(WEAK), scorer.llms.index(STRONG)]
    np.testing.assert_allclose(r.strong_score(prompts), s[:, cols[1]] - s[:, cols[0]], atol=1e-5)
    with pytest.raises(ValueError, match=r"unknown fields \['k'\]"):
        build_router({"type": "gmtrouter", "checkpoint": str(path), "llm_map": {"mistral-eval-name": WEAK}, "k": 1},
                     ctx)
