"""Graph construction on a hand-written log: node counts, edge types, hiding, graph-level errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlrouter.data.formats import GMTRecord
from rlrouter.data.io import DataFileError, read_records
from rlrouter.gmt.graph import EDGE_TYPES, GraphError, build_graph, normalize_feedback
from tests.helpers import hash_embed


def log() -> list[GMTRecord]:
    rows = [
        {"user_id": "alice", "interactions": [
            # conversation s1, turn 1: both candidates rated
            {"query": "What is 2+2?", "model_used": "big", "user_feedback": 5, "timestamp": 10, "session_id": "s1"},
            {"query": "What is 2+2?", "model_used": "small", "user_feedback": 2, "timestamp": 11, "session_id": "s1"},
            # turn 2 of s1
            {"query": "And 3+3?", "model_used": "small", "user_feedback": 4, "timestamp": 20, "session_id": "s1"},
            {"query": "And 3+3?", "model_used": "big", "user_feedback": 4, "timestamp": 21, "session_id": "s1"},
            # conversation s2: one turn, one candidate
            {"query": "Capital of France?", "model_used": "small", "user_feedback": 3, "timestamp": 30,
             "session_id": "s2"},
        ]},
        {"user_id": "bob", "interactions": [
            # same question as alice's, other whitespace: the same query node
            {"query": "What is  2+2? ", "model_used": "big", "user_feedback": 1, "timestamp": 5, "session_id": "b1"},
            {"query": "What is  2+2? ", "model_used": "small", "user_feedback": 4, "timestamp": 6, "session_id": "b1"},
        ]},
    ]
    return [GMTRecord.from_dict(r) for r in rows]


def test_node_counts_and_features():
    g = build_graph(log(), embed=hash_embed)
    assert g.counts() == {"user": 2, "session": 7, "query": 3, "response": 7, "llm": 2}
    assert g.users == ["alice", "bob"]
    assert g.llms == ["big", "small"]  # sorted when not given
    x = g.x_dict()
    assert torch.equal(x["user"], torch.zeros(2, 1))
    assert torch.equal(x["session"], torch.zeros(7, 1))
    assert x["query"].shape == (3, 8) and x["llm"].shape == (2, 8)
    # response features: feedback scaled from [-1, 5] to [0, 1]
    f = torch.tensor([1.0, 0.5, 5 / 6, 5 / 6, 4 / 6, 2 / 6, 5 / 6])
    assert x["response"].shape == (7, 9)
    assert torch.allclose(x["response"][:, 0], f)
    # the rating bound to the candidate that earned it: (f - 1/2) * llm embedding
    assert torch.allclose(x["response"][1, 1:], 0.0 * x["llm"][1])
    assert torch.allclose(x["response"][0, 1:], 0.5 * x["llm"][0])
    assert torch.allclose(x["response"][5, 1:], (2 / 6 - 0.5) * x["llm"][0])
    assert float(normalize_feedback(-1.0)) == 0.0


def test_edge_types_and_counts():
    g = build_graph(log(), embed=hash_embed)
    data = g.hetero()
    assert set(data.edge_types) == set(EDGE_TYPES)
    for et in EDGE_TYPES[:4] + EDGE_TYPES[5:9]:
        assert data[et].edge_index.shape == (2, 7), et
    # session -> user
    assert data["session", "belongs_to", "user"].edge_index.tolist() == [[0, 1, 2, 3, 4, 5, 6],
                                                                       [0, 0, 0, 0, 0, 1, 1]]
    # query nodes: alice's and bob's "What is 2+2?" share node 0
    assert data["query", "asked_in", "session"].edge_index[0].tolist() == [0, 0, 1, 1, 2, 0, 0]
    # previous session: turn 2 of s1 links to the same candidate's session on turn 1
    follows = data["session", "follows", "session"].edge_index
    assert sorted(map(tuple, follows.t().tolist())) == [(2, 1), (3, 0)]
    # the reverse edge types are the flipped forward ones
    assert torch.equal(data["session", "precedes", "session"].edge_index, follows.flip(0))
    assert torch.equal(data["user", "owns", "session"].edge_index,
                       data["session", "belongs_to", "user"].edge_index.flip(0))
    assert g.multi_turn


def test_groups_skip_ties_and_singletons():
    g = build_graph(log(), embed=hash_embed)
    # alice turn 1 (5 vs 2), bob (1 vs 4); alice turn 2 is a tie (4 vs 4), s2 has one rating
    assert g.groups().tolist() == [[0, 1], [5, 6]]


def test_hidden_interactions_lose_their_edges():
    g = build_graph(log(), embed=hash_embed)
    visible = torch.ones(7, dtype=torch.bool)
    visible[1] = False
    e = g.edge_index_dict(visible)
    assert 1 not in e[("session", "belongs_to", "user")][0].tolist()
    assert 1 not in e[("response", "rates", "session")][0].tolist()
    # session 2 followed session 1, which is hidden: that edge goes too
    assert e[("session", "follows", "session")].t().tolist() == [[3, 0]]
    assert g.groups(visible).tolist() == [[5, 6]]


def test_model_outside_known_candidates_names_record_and_field():
    with pytest.raises(GraphError) as err:
        build_graph(log(), llms=["big", "medium"], embed=hash_embed)
    assert err.value.record == 0
    assert err.value.field == "interactions[1].model_used"
    assert "'small' is not a known candidate" in str(err.value)


def test_duplicate_rating_in_a_turn_is_an_error():
    rec = GMTRecord.from_dict({"user_id": "u", "interactions": [
        {"query": "q", "model_used": "a", "user_feedback": 1, "timestamp": 1, "session_id": "s"},
        {"query": "q", "model_used": "a", "user_feedback": 2, "timestamp": 2, "session_id": "s"}]})
    with pytest.raises(GraphError, match=r"record 3: field 'interactions\[1\].model_used'.*already rated"):
        build_graph([rec], embed=hash_embed, record_offset=3)


def test_malformed_record_file_names_line_and_field(tmp_path):
    good = log()[0].to_dict()
    bad = json.loads(json.dumps(good))
    bad["interactions"][2]["user_feedback"] = 9
    path = tmp_path / "logs.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataFileError) as err:
        read_records(path, "gmtrouter")
    assert err.value.location == "2"
    assert err.value.field == "interactions[2].user_feedback"
    assert "must be in [-1.0, 5.0]" in str(err.value)


def test_extend_adds_a_user_and_reuses_query_nodes():
    g = build_graph(log()[:1], embed=hash_embed)
    n_q = len(g.query_keys)
    new = g.extend([log()[1]], embed=hash_embed)
    assert new.tolist() == [5, 6]
    assert g.users == ["alice", "bob"]
    assert len(g.query_keys) == n_q  # bob's question is alice's first one
    assert g.groups().tolist() == [[0, 1], [5, 6]]
    full = build_graph(log(), embed=hash_embed)
    for name in ("user", "query", "llm", "feedback", "prev"):
        assert torch.equal(getattr(g, name), getattr(full, name)), name
